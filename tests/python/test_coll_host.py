"""coll.py's slicing (which elements and rows each rank owns, the shapes
reduce_scatter returns and all_gather takes) against loom.h's rule written
out element by element, at W = 1..64; and its refusals. No torch needed."""
import pytest

from loom import coll
from loom.errors import InvalidArgumentError


def _owner_table(count, unit, world):
    """Which rank owns each element, from loom.h's words: units of `unit`
    elements, S = ceil(units / W) units per rank, in rank order."""
    units = -(-count // unit)
    s = -(-units // world)
    return [min((i // unit) // s, world - 1) if s else 0 for i in range(count)]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8, 16, 64])
def test_every_element_has_one_owner_and_slices_are_contiguous(world):
    for count, unit in [(1, 8), (7, 8), (8, 8), (21, 8), (1000, 8), (5 * 16, 16), (3 * 24, 24), (64 * 7, 7),
                        (130 * 3, 3)]:
        owner = _owner_table(count, unit, world)
        seen = []
        for p in range(world):
            b, e = coll.slice_range(count, unit, world, p)
            assert 0 <= b <= e <= count
            assert all(owner[i] == p for i in range(b, e)), (count, unit, world, p)
            assert b % unit == 0 or b == count  # whole units
            seen.extend(range(b, e))
        assert seen == list(range(count))  # each element once, in rank order


def test_shapes_of_slices_and_wholes():
    assert coll.layout_of((5, 4, 4)) == (80, 16, 16)
    assert coll.layout_of((21,)) == (21, 0, 8)
    assert [coll.slice_shape((5, 16), 2, p) for p in (0, 1)] == [(3, 16), (2, 16)]
    assert [coll.slice_shape((1, 16), 2, p) for p in (0, 1)] == [(1, 16), (0, 16)]
    assert [coll.slice_shape((21,), 2, p) for p in (0, 1)] == [(16,), (5,)]
    assert coll.slice_shape((6, 2, 3), 4, 3) == (0, 2, 3)
    assert coll.gathered_shape((2, 16), 2, 1, size=5) == (5, 16)
    assert coll.gathered_shape((3, 2, 8), 4, 0) == (12, 2, 8)
    with pytest.raises(InvalidArgumentError, match=r"rank 1 of 2 owns a slice of shape \(2, 16\) of the whole "
                                                   r"\(5, 16\)"):
        coll.gathered_shape((3, 16), 2, 1, size=5)
    with pytest.raises(InvalidArgumentError, match="pass size= for uneven slices"):
        coll.gathered_shape((3,), 2, 0)  # 6 elements cut in units of 8: rank 0 owns all of them
    with pytest.raises(InvalidArgumentError, match="size=0 must be >= 1"):
        coll.gathered_shape((0, 4), 2, 1, size=0)


class _Comm:
    size, rank = 2, 0


def test_spec_refusals_name_the_argument():
    c = _Comm()
    with pytest.raises(InvalidArgumentError, match="norm='rms' needs rows"):
        coll.CollSpec(c, "all_reduce", (64,), "bfloat16", None, norm="rms")
    with pytest.raises(InvalidArgumentError, match="norm='batch'; expected one of"):
        coll.CollSpec(c, "all_reduce", (4, 8), "bfloat16", None, norm="batch")
    with pytest.raises(InvalidArgumentError, match="eps=0.0 must be finite and > 0"):
        coll.CollSpec(c, "all_reduce", (4, 8), "bfloat16", None, norm="rms", eps=0.0)
    with pytest.raises(InvalidArgumentError, match="algo='two_shot' is all_reduce's choice"):
        coll.CollSpec(c, "reduce_scatter", (4, 8), "bfloat16", None, algo="two_shot")
    with pytest.raises(InvalidArgumentError, match="all_gather copies"):
        coll.CollSpec(c, "all_gather", (4, 8), "bfloat16", "float32")
    with pytest.raises(InvalidArgumentError, match=r"x.dtype=torch.int32 is not supported"):
        coll.CollSpec(c, "all_reduce", (4, 8), "int32", None)
    with pytest.raises(InvalidArgumentError, match=r"shape \(0, 8\): no elements"):
        coll.CollSpec(c, "all_reduce", (0, 8), "float32", None)
    s = coll.CollSpec(c, "all_gather", (5, 16), "float16", None)
    assert (s.count, s.cols, s.slice, s.in_elems) == (80, 16, (0, 48), 48)
    d = coll.CollSpec(c, "all_reduce", (4, 8), "bfloat16", "float32", norm="layer", eps=1e-6, algo="ll").desc()
    assert (d.count, d.cols, d.norm, d.algo, d.world_size) == (32, 8, 2, 3, 2)
