"""errors.py - loom's result codes as Python exceptions.

Every failed libloom call raises the class of its loom_result_t, carrying
the code (.code, .code_name) and loom_last_error()'s message, which names
the argument and the value that were wrong. Checks the binding makes itself
before calling libloom (tensor dtype, shape, device, contiguity) raise the
same classes with the same codes, so callers catch one hierarchy:

    LoomError                         any failure (.code, .code_name, .message)
      InvalidArgumentError (ValueError)   LOOM_ERR_INVALID_ARGUMENT
      UnsupportedError                    LOOM_ERR_UNSUPPORTED
        NcclMismatchError                 the NCCL libloom reaches is not the one it was built for
        LibraryVersionError               the libloom found is another version than this binding
      CudaError                           LOOM_ERR_CUDA
      NcclError                           LOOM_ERR_NCCL
      OutOfMemoryError (MemoryError)      LOOM_ERR_OUT_OF_MEMORY
      WaitTimeoutError (TimeoutError)     LOOM_ERR_TIMEOUT: a device-side or bootstrap wait expired
      InternalError                       LOOM_ERR_INTERNAL
    LibraryNotFoundError (OSError)    libloom.so could not be found or loaded
"""

from ._structs import Result

SUCCESS = int(Result.SUCCESS)
ERR_INVALID_ARGUMENT = int(Result.ERR_INVALID_ARGUMENT)
ERR_UNSUPPORTED = int(Result.ERR_UNSUPPORTED)
ERR_CUDA = int(Result.ERR_CUDA)
ERR_NCCL = int(Result.ERR_NCCL)
ERR_OUT_OF_MEMORY = int(Result.ERR_OUT_OF_MEMORY)
ERR_TIMEOUT = int(Result.ERR_TIMEOUT)
ERR_INTERNAL = int(Result.ERR_INTERNAL)

# loom_result_string's names
CODE_NAMES = {int(r): "LOOM_" + r.name for r in Result}


class LoomError(RuntimeError):
    """A loom call failed. .code is the loom_result_t, .message loom's words."""

    code = ERR_INTERNAL

    def __init__(self, message, code=None, function=None):
        if code is not None:
            self.code = code
        self.message = message
        self.function = function
        where = f"{function}: " if function and not message.startswith(function) else ""
        super().__init__(f"{where}{message} [{self.code_name}]")

    @property
    def code_name(self):
        return CODE_NAMES.get(self.code, f"LOOM_ERR_UNKNOWN({self.code})")


class InvalidArgumentError(LoomError, ValueError):
    code = ERR_INVALID_ARGUMENT


class UnsupportedError(LoomError):
    code = ERR_UNSUPPORTED


class NcclMismatchError(UnsupportedError):
    """The NCCL library libloom's calls reach cannot run loom's kernels (older
    than 2.28, another major.minor than libloom's headers, or calls split
    over two files). .loom_nccl / .other_nccl describe the libraries
    involved (version text and path)."""

    def __init__(self, message, loom_nccl=None, other_nccl=None, function=None):
        self.loom_nccl = loom_nccl
        self.other_nccl = other_nccl
        super().__init__(message, function=function)


class LibraryVersionError(UnsupportedError):
    """The libloom found is another version than this binding (another
    major.minor, or without functions the binding calls): it was found and
    loads, so this is not LibraryNotFoundError. .path is the file,
    .library_version and .binding_version (major, minor, patch) the two
    versions (library_version None where the file does not say)."""

    def __init__(self, message, path=None, library_version=None, binding_version=None):
        self.path = path
        self.library_version = library_version
        self.binding_version = binding_version
        super().__init__(message)


class CudaError(LoomError):
    code = ERR_CUDA


class NcclError(LoomError):
    code = ERR_NCCL


class OutOfMemoryError(LoomError, MemoryError):
    code = ERR_OUT_OF_MEMORY


class WaitTimeoutError(LoomError, TimeoutError):
    code = ERR_TIMEOUT


class InternalError(LoomError):
    code = ERR_INTERNAL


class LibraryNotFoundError(OSError):
    """libloom.so was not found where the binding looked, or did not load."""


_CLASSES = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_UNSUPPORTED: UnsupportedError,
    ERR_CUDA: CudaError,
    ERR_NCCL: NcclError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError,
    ERR_TIMEOUT: WaitTimeoutError,
    ERR_INTERNAL: InternalError,
}


def error_class(code):
    """The exception class of a loom_result_t value (LoomError for unknown codes)."""
    return _CLASSES.get(code, LoomError)


def make_error(code, message, function=None):
    """An exception instance for a failed call: the class of `code`."""
    cls = error_class(code)
    if cls is LoomError:
        return LoomError(message, code=code, function=function)
    return cls(message, function=function)
