"""Exceptions torch-trident raises. Every one names what was wrong and what to do."""


class TridentError(RuntimeError):
    """Base class of torch-trident's own errors."""


class UnsupportedError(TridentError, NotImplementedError):
    """The captured program contains something the lowering cannot take (named in the message).

    Raised at compile time, never at run time: nothing runs with a wrong result instead."""


class MissPolicyError(TridentError):
    """A call missed every specialization and the configured policy (on_miss="error", or the
    max_specializations cap with on_miss="error") forbids compiling a new one."""


class CaptureRaisedError(UnsupportedError):
    """Capture stopped on an exception the user's own code raised while traced (an IndexError, a
    ValueError of theirs, an op given arguments eager refuses too). The controller then runs the
    function eagerly, so the caller sees eager's exception, of eager's type, from their own line;
    should eager not raise after all, the call's eager result is returned, with a warning."""
