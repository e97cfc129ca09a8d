"""loom_result_t codes as Python exceptions, with loom's own messages."""
import ctypes
import threading

import pytest

import loom
from loom import _lib, errors
from loom._structs import CommInfo, GemmDesc, Result


def test_every_code_has_its_class_and_libloom_agrees_on_the_names(lib):
    for r in Result:
        assert errors.CODE_NAMES[int(r)] == "LOOM_" + r.name
        assert _lib.result_string(int(r)) == errors.CODE_NAMES[int(r)]
        if r == Result.SUCCESS:
            continue
        e = errors.make_error(int(r), "what went wrong", "loom_x")
        assert isinstance(e, loom.LoomError)
        assert e.code == int(r) and e.code_name == "LOOM_" + r.name
        assert "what went wrong" in str(e) and "LOOM_" + r.name in str(e)
    classes = {errors.error_class(int(r)) for r in Result if r != Result.SUCCESS}
    assert len(classes) == len(Result) - 1  # one class per code
    assert _lib.result_string(99) == "LOOM_ERR_UNKNOWN"
    e = errors.make_error(99, "odd", "loom_x")
    assert type(e) is loom.LoomError and e.code == 99 and "UNKNOWN" in e.code_name


def test_classes_are_also_the_python_builtins_they_mean():
    assert issubclass(loom.InvalidArgumentError, ValueError)
    assert issubclass(loom.OutOfMemoryError, MemoryError)
    assert issubclass(loom.WaitTimeoutError, TimeoutError)
    assert issubclass(loom.NcclMismatchError, loom.UnsupportedError)
    assert issubclass(loom.LibraryNotFoundError, OSError)


def test_libloom_messages_become_exceptions(lib):
    with pytest.raises(loom.InvalidArgumentError) as ei:
        _lib.call("loom_comm_get_info", None, ctypes.byref(CommInfo()))
    assert ei.value.code == errors.ERR_INVALID_ARGUMENT
    assert ei.value.message == "loom_comm_get_info: comm=NULL"
    assert ei.value.function == "loom_comm_get_info"

    with pytest.raises(loom.InvalidArgumentError, match=r"plan=0x1234 is not a live loom plan"):
        _lib.call("loom_plan_destroy", 0x1234)

    d = GemmDesc(m=16, n=12, k=64)
    with pytest.raises(loom.InvalidArgumentError, match=r"loom_gemm: n=12 must be a multiple of 8"):
        _lib.call("loom_gemm", ctypes.byref(d), 0x10000, 0x20000, 0x30000, None, None)

    d.struct_size = 8  # a stale header: the library says so
    with pytest.raises(loom.InvalidArgumentError, match=r"struct_size=8, expected %d" % ctypes.sizeof(GemmDesc)):
        _lib.call("loom_gemm", ctypes.byref(d), 0x10000, 0x20000, 0x30000, None, None)


def test_messages_are_read_in_the_thread_that_failed(lib):
    """loom_last_error is thread-local: a failure in another thread does not
    replace this thread's message."""
    with pytest.raises(loom.InvalidArgumentError) as mine:
        _lib.call("loom_plan_destroy", 0x1111)
    box = {}

    def other():
        try:
            _lib.call("loom_plan_destroy", 0x2222)
        except loom.LoomError as e:
            box["e"] = e
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert "0x2222" in box["e"].message and "0x1111" in mine.value.message
    assert "0x1111" in _lib.last_error()
