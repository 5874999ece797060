"""Library code logs under the ``ngramspec`` logger; the command line shows it on stderr."""
from __future__ import annotations

import logging

from ngramspec.log import show_on_stderr


def test_the_command_lines_set_up_shows_one_line_per_record_on_the_stderr_of_the_moment(capsys):
    log = logging.getLogger("ngramspec")
    level, handlers = log.level, list(log.handlers)
    try:
        show_on_stderr()
        show_on_stderr()                                    # once per process
        logging.getLogger("ngramspec.models").info("fetching %s", "toy")
        logging.getLogger("ngramspec.models").debug("not shown")
        assert capsys.readouterr().err == "ngramspec: fetching toy\n"
    finally:
        log.handlers[:] = handlers
        log.setLevel(level)
