"""_structs.py - loom.h's enums and structs as ctypes types.

One Python class per C type, with the C name beside it (_c_name_), and for
structs with an initializer macro its name (_c_init_) and the values it
sets (_defaults_): a new instance is what the macro gives, struct_size
included. tests/python/test_structs.py compiles a C program against
include/loom.h and checks every size, offset, enum value and initializer
value here against the compiler's.
"""
import ctypes
import enum

c_int, c_int64, c_uint32, c_uint64 = ctypes.c_int, ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64
c_size_t, c_float, c_void_p = ctypes.c_size_t, ctypes.c_float, ctypes.c_void_p
c_double = ctypes.c_double


class CEnum(enum.IntEnum):
    """An enum of loom.h; C name of a member = C_PREFIX[its class] + its name."""

    @classmethod
    def c_names(cls):
        return {m: C_PREFIX[cls] + m.name for m in cls}


class Result(CEnum):
    SUCCESS = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_UNSUPPORTED = 2
    ERR_CUDA = 3
    ERR_NCCL = 4
    ERR_OUT_OF_MEMORY = 5
    ERR_TIMEOUT = 6
    ERR_INTERNAL = 7


class DType(CEnum):
    FP32 = 0
    FP16 = 1
    BF16 = 2


class Activation(CEnum):
    NONE = 0
    RELU = 1
    GELU_TANH = 2
    GELU_ERF = 3


class Layout(CEnum):
    KN = 0
    NK = 1


class Pooling(CEnum):
    SUM = 0
    MEAN = 1


class EmbeddingPath(CEnum):
    AUTO = 0
    ZERO_COPY = 1
    GIN = 2
    STAGED = 3


class TpTransfer(CEnum):
    AUTO = 0
    SEQUENTIAL = 1
    COPY_ENGINE = 2
    SM_COPY = 3
    SM_ATOMIC = 4
    BULK_REDUCE = 5
    DECOMPOSED = 6


class TpGemm(CEnum):
    AUTO = 0
    LOOM = 1
    CUBLASLT = 2


class OptimForm(CEnum):
    AUTO = 0
    RS_OPT_AG = 1
    AR_OPT = 2


class CollAlgo(CEnum):
    AUTO = 0
    ONE_SHOT = 1
    TWO_SHOT = 2
    LL = 3
    PUSH = 4


class Norm(CEnum):
    NONE = 0
    RMS = 1
    LAYER = 2


class MoeMlpPath(CEnum):
    AUTO = 0
    FUSED = 1
    UNFUSED = 2
    FUSED_ALL = 3


class ProgLayout(CEnum):
    SLICED = 0
    REPLICATED = 1
    LOCAL = 2
    ROOT = 3


C_PREFIX = {ProgLayout: "LOOM_PROG_", Result: "LOOM_", DType: "LOOM_", Activation: "LOOM_ACT_", Layout: "LOOM_B_", Pooling: "LOOM_POOL_",
            EmbeddingPath: "LOOM_EMB_PATH_", TpTransfer: "LOOM_TP_", TpGemm: "LOOM_TP_GEMM_", OptimForm: "LOOM_OPTIM_", CollAlgo: "LOOM_COLL_",
            Norm: "LOOM_NORM_", MoeMlpPath: "LOOM_MOE_MLP_"}
ENUMS = tuple(C_PREFIX)


class CStruct(ctypes.Structure):
    """A loom.h struct. Keyword arguments set fields; struct_size (where the
    struct has one) and the initializer macro's values are set first."""

    _c_name_ = None
    _c_init_ = None
    _defaults_ = {}

    def __init__(self, **fields):
        super().__init__()
        names = {f[0] for f in self._fields_}
        if "struct_size" in names:
            self.struct_size = ctypes.sizeof(type(self))
        for k, v in self._defaults_.items():
            setattr(self, k, v)
        for k, v in fields.items():
            if k not in names:
                raise TypeError(f"{self._c_name_} has no field {k!r} (fields: {', '.join(sorted(names))})")
            setattr(self, k, v)

    def as_dict(self):
        return {f[0]: getattr(self, f[0]) for f in self._fields_}

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({body})"


class Config(CStruct):
    _c_name_, _c_init_ = "loom_config_t", "LOOM_CONFIG_INIT"
    _fields_ = [("struct_size", c_size_t), ("workspace_bytes", c_size_t), ("timeout_ms", c_int)]


class CommInfo(CStruct):
    _c_name_, _c_init_ = "loom_comm_info_t", "LOOM_COMM_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("rank", c_int), ("size", c_int), ("lsa_rank", c_int), ("lsa_size", c_int),
                ("device", c_int), ("sm_count", c_int), ("cc_major", c_int), ("cc_minor", c_int),
                ("l2_bytes", c_size_t), ("workspace_bytes", c_size_t), ("workspace_free", c_size_t),
                ("timeout_ms", c_int), ("nccl_version", c_int)]


class Epilogue(CStruct):
    _c_name_, _c_init_ = "loom_epilogue_t", "LOOM_EPILOGUE_INIT"
    _fields_ = [("struct_size", c_size_t), ("scale", c_float), ("bias", c_void_p), ("activation", c_int),
                ("dropout_p", c_float), ("dropout_seed", c_uint64), ("dropout_offset", c_uint64),
                ("residual", c_void_p)]
    _defaults_ = {"scale": 1.0, "activation": int(Activation.NONE)}


class GemmDesc(CStruct):
    _c_name_, _c_init_ = "loom_gemm_desc_t", "LOOM_GEMM_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("m", c_int64), ("n", c_int64), ("k", c_int64),
                ("ab_type", c_int), ("c_type", c_int), ("b_layout", c_int), ("has_bias", c_int)]
    _defaults_ = {"ab_type": int(DType.BF16), "c_type": int(DType.BF16), "b_layout": int(Layout.KN)}


class GroupedGemmDesc(CStruct):
    _c_name_, _c_init_ = "loom_grouped_gemm_desc_t", "LOOM_GROUPED_GEMM_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("groups", c_int), ("max_rows", c_int64), ("n", c_int64),
                ("k", c_int64), ("rows_hint", c_int64), ("ab_type", c_int), ("c_type", c_int),
                ("b_layout", c_int), ("has_bias", c_int)]
    _defaults_ = {"ab_type": int(DType.BF16), "c_type": int(DType.BF16), "b_layout": int(Layout.NK)}


class EmbeddingDesc(CStruct):
    _c_name_, _c_init_ = "loom_embedding_desc_t", "LOOM_EMBEDDING_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("world_size", c_int), ("tables_per_rank", ctypes.POINTER(c_int)),
                ("rows", ctypes.POINTER(c_int64)), ("dim", c_int), ("global_batch", c_int64),
                ("pooling", c_int), ("per_sample_weights", c_int), ("table_type", c_int), ("out_type", c_int),
                ("slice_samples", c_int), ("grid_blocks", c_int), ("check_indices_sync", c_int)]
    _defaults_ = {"pooling": int(Pooling.SUM), "table_type": int(DType.FP32), "out_type": int(DType.FP32)}


class EmbeddingPlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_embedding_plan_info_t", "LOOM_EMBEDDING_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("path", c_int), ("slice_samples", c_int), ("slices_per_rank", c_int), ("tasks", c_int64),
                ("grid_blocks", c_int), ("num_flags", c_uint32), ("num_counters", c_uint32),
                ("workspace_bytes", c_size_t), ("staging_bytes", c_size_t)]


class NcclInfo(CStruct):
    _c_name_, _c_init_ = "loom_nccl_info_t", "LOOM_NCCL_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("header_version", c_int), ("loaded_version", c_int),
                ("consistent", c_int), ("path", ctypes.c_char * 1024)]


class TpDesc(CStruct):
    _c_name_, _c_init_ = "loom_tp_desc_t", "LOOM_TP_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("m", c_int64), ("n", c_int64), ("k", c_int64),
                ("ab_type", c_int), ("c_type", c_int), ("b_layout", c_int), ("has_bias", c_int),
                ("activation", c_int), ("world_size", c_int), ("transfer", c_int), ("chunk_rows", c_int),
                ("comm_blocks", c_int), ("sequential_gemm", c_int)]
    _defaults_ = {"ab_type": int(DType.BF16), "c_type": int(DType.BF16), "b_layout": int(Layout.KN),
                  "activation": int(Activation.NONE), "transfer": int(TpTransfer.AUTO),
                  "sequential_gemm": int(TpGemm.AUTO)}


class TpPlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_tp_plan_info_t", "LOOM_TP_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("transfer", c_int), ("shard_rows", c_int64), ("chunk_rows", c_int),
                ("comm_blocks", c_int), ("gemm_bm", c_int), ("gemm_bn", c_int), ("gemm_grid", c_int),
                ("deterministic", c_int),
                ("symmetric_bytes", c_size_t), ("device_bytes", c_size_t), ("workspace_bytes", c_size_t),
                ("gemm", c_int)]
    _defaults_ = {"transfer": int(TpTransfer.AUTO), "gemm": int(TpGemm.AUTO)}


class OptimDesc(CStruct):
    _c_name_, _c_init_ = "loom_optim_desc_t", "LOOM_OPTIM_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("world_size", c_int), ("num_tensors", c_int),
                ("params", ctypes.POINTER(c_void_p)), ("grads", ctypes.POINTER(c_void_p)),
                ("numels", ctypes.POINTER(c_int64)), ("param_type", c_int), ("grad_type", c_int), ("form", c_int),
                ("lr", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float), ("weight_decay", c_float),
                ("weight_decays", ctypes.POINTER(c_float)), ("decoupled_weight_decay", c_int),
                ("bias_correction", c_int), ("average_grads", c_int), ("use_nvlamb", c_int), ("chunk_elems", c_int64)]
    _defaults_ = {"param_type": int(DType.FP32), "grad_type": int(DType.FP32), "form": int(OptimForm.AUTO),
                  "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "decoupled_weight_decay": 1,
                  "bias_correction": 1, "average_grads": 1}


class OptimArgs(CStruct):
    _c_name_, _c_init_ = "loom_optim_args_t", "LOOM_OPTIM_ARGS_INIT"
    _fields_ = [("struct_size", c_size_t), ("lr", c_void_p), ("grad_scale", c_void_p), ("found_inf", c_void_p),
                ("grad_nonfinite", c_void_p)]


class OptimPlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_optim_plan_info_t", "LOOM_OPTIM_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("num_tensors", c_int), ("num_ar_tensors", c_int),
                ("chunk_elems", c_int64), ("chunks", c_int64), ("global_chunks", c_int64), ("state_elems", c_int64),
                ("exp_avg", c_void_p), ("exp_avg_sq", c_void_p), ("master", c_void_p), ("step", c_void_p),
                ("kernels_per_step", c_int), ("device_bytes", c_size_t), ("workspace_bytes", c_size_t)]


class MoeDesc(CStruct):
    _c_name_, _c_init_ = "loom_moe_desc_t", "LOOM_MOE_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("hidden", c_int), ("experts", c_int), ("topk", c_int),
                ("max_tokens", c_int64), ("capacity", c_int64), ("dtype", c_int), ("ffn", c_int),
                ("mlp_path", c_int)]
    _defaults_ = {"dtype": int(DType.BF16)}


class MoePlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_moe_plan_info_t", "LOOM_MOE_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("local_experts", c_int), ("first_expert", c_int),
                ("max_recv_rows", c_int64), ("recv", c_void_p), ("expert_offsets", c_void_p),
                ("symmetric_bytes", c_size_t), ("device_bytes", c_size_t)]


class CollDesc(CStruct):
    _c_name_, _c_init_ = "loom_coll_desc_t", "LOOM_COLL_DESC_INIT"
    _fields_ = [("struct_size", c_size_t), ("count", c_int64), ("dtype", c_int), ("out_type", c_int), ("cols", c_int64),
                ("norm", c_int), ("norm_eps", c_float), ("algo", c_int), ("world_size", c_int), ("blocks", c_int)]
    _defaults_ = {"dtype": int(DType.BF16), "out_type": int(DType.BF16), "norm": int(Norm.NONE), "norm_eps": 1e-5,
                  "algo": int(CollAlgo.AUTO)}


class CollPlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_coll_plan_info_t", "LOOM_COLL_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("algo", c_int), ("slice_elems", c_int64), ("my_begin", c_int64),
                ("my_len", c_int64), ("chunk_elems", c_int64), ("blocks", c_int), ("one_shot_max_bytes", c_size_t),
                ("deterministic", c_int), ("symmetric_bytes", c_size_t), ("workspace_bytes", c_size_t)]
    _defaults_ = {"algo": int(CollAlgo.AUTO)}


class ProgAttr(CStruct):
    _c_name_, _c_init_ = "loom_prog_attr_t", "LOOM_PROG_ATTR_INIT"
    _fields_ = [("struct_size", c_size_t), ("value", c_double), ("seed", c_uint64), ("dim", c_int), ("root", c_int),
                ("reduce", c_int), ("dtype", c_int), ("group_offset", c_int)]
    _defaults_ = {"group_offset": 1}


class ProgIo(CStruct):
    """One input or output of a compiled program on this rank (loom_prog_plan_io). Its int64 arrays are
    not printable by the initializer check, so LOOM_PROG_IO_INIT (struct_size, zeros) is not mirrored."""
    _c_name_, _c_init_ = "loom_prog_io_t", None
    _fields_ = [("struct_size", c_size_t), ("name", ctypes.c_char * 48), ("dtype", c_int), ("rank", c_int),
                ("dims", c_int64 * 6), ("count", c_int64), ("whole", c_int64 * 6), ("layout", c_int), ("arg", c_int),
                ("group", c_int), ("offset", c_int64), ("held", c_int)]


class ProgPlanInfo(CStruct):
    _c_name_, _c_init_ = "loom_prog_plan_info_t", "LOOM_PROG_PLAN_INFO_INIT"
    _fields_ = [("struct_size", c_size_t), ("ninputs", c_int), ("noutputs", c_int), ("world", c_int),
                ("groups", c_int), ("units", c_int), ("kernels", c_int), ("compiled", c_int),
                ("compile_ms", c_double), ("arena_bytes", c_size_t), ("workspace_bytes", c_size_t),
                ("schedule", ctypes.c_char * 48)]


class ProgTuneRow(CStruct):
    """One schedule loom_prog_tune listed (no initializer macro: the tuner fills it)."""
    _c_name_, _c_init_ = "loom_prog_tune_row_t", None
    _fields_ = [("schedule", ctypes.c_char * 48), ("own", c_int), ("predicted_us", c_double),
                ("measured_us", c_double), ("eligible", c_int), ("note", ctypes.c_char * 160)]


class ProgTuneResult(CStruct):
    _c_name_, _c_init_ = "loom_prog_tune_result_t", "LOOM_PROG_TUNE_RESULT_INIT"
    _fields_ = [("struct_size", c_size_t), ("depth", c_int), ("max", c_int), ("rows", ctypes.POINTER(ProgTuneRow)),
                ("cap", c_int), ("n", c_int), ("winner", c_int), ("rank_correlation", c_double),
                ("key", ctypes.c_char * 160), ("value", ctypes.c_char * 160)]
    _defaults_ = {"depth": 6, "max": 200}


STRUCTS = (ProgAttr, ProgIo, ProgPlanInfo, ProgTuneRow, ProgTuneResult,
           Config, CommInfo, Epilogue, GemmDesc, EmbeddingDesc, EmbeddingPlanInfo, NcclInfo, TpDesc, TpPlanInfo,
           OptimDesc, OptimArgs, OptimPlanInfo, CollDesc, CollPlanInfo)
