"""graft.Patterns: PopART's pattern selection, accepted for compatibility.

graft's own graph passes replace PopART's patterns, so selecting patterns has no effect; the
object records the level and the patterns enabled or disabled so that PopART programs run.
"""
from . import _graft

PatternsLevel = _graft.PatternsLevel


class Patterns:
    """``Patterns()``, ``Patterns(PatternsLevel.All)`` or ``Patterns(["PreUniRepl", ...])``."""

    def __init__(self, level=None, patterns=None):
        if isinstance(level, (list, tuple)):
            level, patterns = None, level
        if level is None:
            level = PatternsLevel.Default
        if not isinstance(level, PatternsLevel):
            raise _graft.Error(f"Patterns: level must be a PatternsLevel, got {level!r}")
        self.level = level
        self._enabled = {name: True for name in (patterns or [])}
        self._names = list(patterns) if patterns is not None else None
        self.runtimeAsserts = True

    def enablePattern(self, name, enabled):
        self._enabled[name] = bool(enabled)
        return self

    def isPatternEnabled(self, name):
        return self._enabled.get(name, self.level != PatternsLevel.NoPatterns)

    def enableRuntimeAsserts(self, enabled):
        self.runtimeAsserts = bool(enabled)
        return self

    # PopART exposes some patterns as properties (patterns.InPlace = False).
    def __getattr__(self, name):
        if name.startswith("_") or not name[:1].isupper():
            raise AttributeError(name)
        return self.isPatternEnabled(name)

    def __setattr__(self, name, value):
        if name[:1].isupper():
            self.enablePattern(name, value)
        else:
            object.__setattr__(self, name, value)

    def _core(self):
        if self._names is not None:
            return _graft._PatternsCore([n for n in self._names if self._enabled.get(n, True)])
        return _graft._PatternsCore(self.level)

    def __repr__(self):
        return f"Patterns({self.level}, {self._enabled})"
