"""Chat conversations of 300-2,000 tokens for exact mode's identity tests at depth.

Verification in real use runs hundreds of tokens deep, where a kernel that rounds a
batch differently from one token shows (a check a few tokens deep passed sizes that
differed there). Each conversation is a task a user would run: a code edit, JSON
extraction, grounded questions, a story, a multi-turn refactor and a code review.
The material is real text from the standard library and tzdata, so nothing is fetched.
"""
from __future__ import annotations

import fnmatch
import importlib.metadata
import inspect
import shlex
import textwrap

from ngramspec.suite.workload import iso3166_rows

STORY_OPENING = """\
The lighthouse on Gannet Rock had been automated for eleven years when Mara Quill
rowed out to it with a toolbox, a thermos of tea and a letter from the harbour
board. The letter said the lamp had failed three nights running and that nobody
could say why. The keeper's cottage still stood at the foot of the tower, its
windows salted white, its door swollen shut. Mara put her shoulder to it twice
before it gave.

Inside, everything was as the last keeper had left it: a table laid for one, a
calendar stopped at March, a row of boots by the stove. On the table lay a logbook
open at its final page. The entries were in a small, careful hand, and the last
one read: "Light steady. Wind north-east, rising. Heard the bell again, though
there is no bell." Mara read it twice. Then she climbed the hundred and twelve
steps to the lamp room, where the great lens turned slowly in the grey afternoon
light, catching and scattering it like water.

The mechanism looked sound. The bulbs were new. The clockwork that turned the lens
had been oiled, and recently, by someone who knew what they were doing. She checked
the wiring from the panel to the lamp and found nothing wrong. When she came down
again the tide had turned, the boat was pulling at its rope, and the light in the
keeper's cottage was on.
"""


def _source(func: object) -> str:
    return textwrap.dedent(inspect.getsource(func))  # type: ignore[arg-type]


def _licence_sections() -> str:
    licence = importlib.metadata.distribution("tzdata").read_text("licenses/licenses/LICENSE_APACHE") or ""
    return licence[: licence.index("3. Grant of Patent License")].strip()


def conversations() -> dict[str, list[dict[str, str]]]:
    """{name: OpenAI-style messages}: six tasks, 300-2,000 tokens each once formatted."""
    table = "\n".join(iso3166_rows()[40:100])
    return {
        "code_edit": [
            {"role": "system", "content": "You are a careful senior Python developer."},
            {"role": "user", "content": "Add type hints to these functions and rename the variable `l` to "
             "something clearer. Keep everything else exactly as it is and output the whole code.\n\n```python\n"
             + _source(textwrap.dedent) + "\n\n" + _source(textwrap.indent) + "```"}],
        "json_extraction": [
            {"role": "user", "content": "Convert this tab-separated table of ISO 3166 country codes into a JSON "
             'array of objects with the keys "code" and "name". Output only the JSON.\n\n' + table}],
        "grounded_qa": [
            {"role": "system", "content": "Answer only from the text the user gives. Quote it where you can."},
            {"role": "user", "content": _licence_sections() + "\n\nWhat does the license say a \"Contribution\" "
             "is, and who grants the copyright license in Section 2? Quote the relevant sentences."}],
        "story": [
            {"role": "system", "content": "You are a novelist. Continue stories in the same voice and tense."},
            {"role": "user", "content": "Here is the opening of my story. Continue it for a few paragraphs: Mara "
             "goes back to the cottage, and we learn who has been keeping the light.\n\n" + STORY_OPENING}],
        "multi_turn_refactor": [
            {"role": "user", "content": "What does this function do?\n\n```python\n" + _source(fnmatch.translate)
             + "```"},
            {"role": "assistant", "content": inspect.getdoc(fnmatch.translate) or ""},
            {"role": "user", "content": "Refactor it: split the loop body into a helper function for the "
             "bracket case, keep the behaviour identical, and show the complete new code."}],
        "code_review": [
            {"role": "user", "content": "Review this class from the standard library. List anything that could "
             "be simplified, then show the `split` function rewritten with comments.\n\n```python\n"
             + _source(shlex.split) + "\n\n" + _source(shlex.shlex.read_token) + "```"}],
    }
