"""_plan.py - the life cycle every Python plan class shares (EmbeddingA2A,
TpPlan, MoE): a libloom plan handle made collectively on a Comm,
registered with it, and destroyed collectively once."""
import ctypes

from . import _lib
from .errors import InvalidArgumentError


class PlanHandle:
    """Mixin: self.comm, self._plan (the loom_plan_t, None once closed);
    _plan_label() names the plan in messages."""
    _plan = None

    def _plan_label(self):
        return f"loom.{type(self).__name__}"

    @property
    def closed(self):
        return self._plan is None

    @property
    def handle(self):
        if self._plan is None:
            raise InvalidArgumentError(f"{self._plan_label()}: the plan is closed")
        return self._plan

    def _create(self, make, desc, info_call, info_type):
        """Collective: makes the plan (`make`(comm, &desc, &plan)), registers
        it with self.comm and returns its info (`info_call` into an
        `info_type`) as a dict without struct_size; a failing info call
        closes the plan again."""
        comm = self.comm
        plan = ctypes.c_void_p()
        comm._bounded(lambda: _lib.call(make, ctypes.c_void_p(comm.handle), ctypes.byref(desc), ctypes.byref(plan)),
                      make)
        self._plan = plan.value
        comm._register_plan(self)
        try:
            pi = info_type()
            _lib.call(info_call, ctypes.c_void_p(self._plan), ctypes.byref(pi))
        except BaseException:
            self.close()
            raise
        info = pi.as_dict()
        del info["struct_size"]
        return info

    def _destroy_plan(self):
        """Collective: loom_plan_destroy and unregistering from the comm;
        False when the plan was already closed."""
        if self._plan is None:
            return False
        p = self._plan
        self.comm._bounded(lambda: _lib.call("loom_plan_destroy", ctypes.c_void_p(p)), "loom_plan_destroy")
        self._plan = None
        self.comm._unregister_plan(self)
        return True
