"""``import popart`` answered by graft: a pure re-export, with no stand-ins.

Used only by bench/compat/popart_tests.sh to run PopART's own tests against graft. Every name
comes from graft; a name graft lacks raises graft's AttributeError.
"""
import graft as _graft
from graft import *  # noqa: F401,F403


def __getattr__(name):
    return getattr(_graft, name)
