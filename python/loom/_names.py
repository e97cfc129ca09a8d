"""_names.py - objects the registered ops (library.py) name by a string:
torch.compile keeps a string in the graph as a constant, where it cannot
keep a Python object. Weak: an object closed or dropped is forgotten."""
import itertools
import weakref

from .errors import InvalidArgumentError


class Names:
    """The open objects of one kind (a loom.optim optimizer, a loom.nn.MoE
    layer), each under a name of its own ("<prefix><n>"). op and arg say,
    in the error, which op's which argument named an unknown one."""

    def __init__(self, prefix, what, op, arg):
        self._live = weakref.WeakValueDictionary()
        self._count = itertools.count()
        self.prefix, self.what, self.op, self.arg = prefix, what, op, arg

    def add(self, obj):
        """Registers obj under a new name, which it returns."""
        name = f"{self.prefix}{next(self._count)}"
        self._live[name] = obj
        return name

    def drop(self, name):
        self._live.pop(name, None)

    def get(self, name, comm_name=None):
        """The open object called `name`, on the comm called comm_name
        (obj.comm.name) when given."""
        obj = self._live.get(name) if isinstance(name, str) else None
        if obj is None:
            raise InvalidArgumentError(f"{self.op}: {self.arg}={name!r} is not an open {self.what} "
                                       f"(open: {sorted(self._live.keys())})")
        if comm_name is not None and obj.comm.name != comm_name:
            raise InvalidArgumentError(f"{self.op}: comm={comm_name!r}; {self.arg} {name!r} runs on "
                                       f"{obj.comm.name!r}")
        return obj
