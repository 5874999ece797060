from ngramspec.suite.sample_prompts import CODE, PROMPTS

__all__ = ["CODE", "PROMPTS"]
