"""What Tandem refuses, as exceptions.

Every error the C++ side raises reaches Python as a subclass of :class:`Error` whose message is the
C++ one-line message: what is wrong, naming the segment, and the fix. Nothing Tandem refuses
crashes the interpreter, and a failed call leaves no segment behind in /dev/shm.
"""

__all__ = ["Error", "SegmentNotFoundError", "ForeignSegmentError", "CorruptSegmentError", "OwnerError",
           "NoSpaceError", "SegmentExistsError", "DTypeError", "ShapeError", "NotInJobError", "SystemCallError"]


class Error(RuntimeError):
    """Base of every Tandem error; ``str(e)`` is one line naming the thing and the fix."""


class SegmentNotFoundError(Error):
    """The segment (dataset cache, weight slab, experience rings, control block) does not exist."""


class ForeignSegmentError(Error):
    """The name holds something else: not a Tandem segment, another kind, or another layout version."""


class CorruptSegmentError(Error):
    """The segment is damaged or unfinished: a bad header or descriptor, a checksum that differs, a
    creator that died before marking it ready."""


class OwnerError(Error):
    """The segment belongs to another user (Tandem never adopts another uid's segment, even as root)."""


class NoSpaceError(Error):
    """/dev/shm has too little room for the segment (checked before anything is written)."""


class SegmentExistsError(Error):
    """The name is taken: another cache of that name, or a weight slab whose writer still runs."""


class DTypeError(Error, TypeError):
    """A tensor's dtype does not fit the segment, or torch has no dtype for the segment's."""


class ShapeError(Error, ValueError):
    """A tensor or model does not match the segment: a shape, a count, or the model signature."""


class NotInJobError(Error):
    """tandem.job() was called in a program that `tandem run` did not start."""


class SystemCallError(Error):
    """A system, CUDA or NCCL call failed; the message names the call, the error, file:line and pid."""
