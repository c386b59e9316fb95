"""PopTorch's log-level helpers, mapped onto graft's single log level."""
import graft


def setPopartLogLevel(level):  # noqa: N802
    graft.getLogger().setLevel(str(level).upper() if not isinstance(level, int) else "WARN")
