"""graft.torch's Python log ("graft.torch"): what the wrapper does on the host (optimizers built
and updated, weight and optimizer-state copies), at the level ``poptorch.setLogLevel`` sets
(default WARN, or POPTORCH_LOG_LEVEL). Records go to stderr and propagate to the root logger."""
import logging
import os
import sys


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (test harnesses swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "WARNING": logging.WARNING, "ERR": logging.ERROR, "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL,
          "OFF": logging.CRITICAL + 10}

logger = logging.getLogger("graft.torch")
if not logger.handlers:
    _h = _StderrHandler()
    _h.setFormatter(logging.Formatter("[graft.torch] [%(levelname)s] %(message)s"))
    logger.addHandler(_h)
logger.setLevel(LEVELS.get(os.environ.get("POPTORCH_LOG_LEVEL", "WARN").upper(), logging.WARNING))


def set_level(name):
    logger.setLevel(LEVELS.get(str(name).upper(), logging.WARNING))
