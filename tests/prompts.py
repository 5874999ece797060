from ngramspec.workloads import CODE, PROMPTS  # noqa: F401
