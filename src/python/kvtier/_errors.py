"""Status codes (equal to kvtier::Code) and the exception carrying one."""
import enum


class Code(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    CORRUPTION = 2
    IO_ERROR = 3
    NO_SPACE = 4
    INVALID_ARGUMENT = 5
    BUSY = 6
    NOT_SUPPORTED = 7
    TIMED_OUT = 8
    NOT_ADMITTED = 9
    CLOSED = 10
    BUFFER_TOO_SMALL = 11
    ABORTED = 12

    @classmethod
    def of(cls, value):
        try:
            return cls(value)
        except ValueError:
            return value


class KvtierError(Exception):
    """A kvtier call failed. `code` is a Code, `message` says what happened."""

    def __init__(self, code, message=""):
        self.code = Code.of(code)
        self.message = message
        name = self.code.name if isinstance(self.code, Code) else str(self.code)
        super().__init__(f"{name}: {message}" if message else name)
