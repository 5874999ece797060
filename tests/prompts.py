from ngramspec.workloads import CODE, PROMPTS

__all__ = ["CODE", "PROMPTS"]
