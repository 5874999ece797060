"""Workload prompts shared by the tests and the benchmarks: code, prose, repetition, JSON, chat."""

CODE = '''def quicksort(items):
    if len(items) <= 1:
        return items
    pivot = items[0]
    left = [x for x in items[1:] if x < pivot]
    right = [x for x in items[1:] if x >= pivot]
    return quicksort(left) + [pivot] + quicksort(right)


def mergesort(items):
'''

PROMPTS = {
    "code": CODE,
    "code_edit": CODE + "    # same as quicksort but stable\n" + CODE.replace("quicksort", "sort_fast"),
    "prose": "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "facts": "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
    "repetitive": "one two three four, one two three four, one two three four, one two three",
    "json": '[{"id": 1, "name": "Alice", "tags": ["admin", "dev"]}, '
            '{"id": 2, "name": "Bob", "tags": ["dev"]}, {"id": 3, ',
    "list": "Shopping list:\n- apples\n- bananas\n- carrots\n- dates\n-",
    "chat": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "Repeat after me: the quick brown fox jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n",
}
