"""TFLite builtin -> IR op tables, and what the int8 importer keeps in int8."""

_UNARY = {"LOGISTIC": "Sigmoid", "RELU": "Relu", "TANH": "Tanh", "HARD_SWISH": "HardSwish",
          "EXP": "Exp", "ABS": "Abs", "NEG": "Neg", "SQRT": "Sqrt", "RSQRT": None, "FLOOR": "Floor",
          "CEIL": "Ceil", "ELU": "Elu", "LOG": "Log", "SIN": "Sin", "COS": "Cos", "ROUND": "Round",
          "SQUARE": None, "GELU": "Gelu", "LEAKY_RELU": "LeakyRelu", "RELU6": "Clip",
          "RELU_N1_TO_1": "Clip", "RELU_0_TO_1": "Clip"}
_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min",
           "POW": "Pow", "SQUARED_DIFFERENCE": None, "PRELU": "PRelu"}
_REDUCE = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
           "REDUCE_PROD": "ReduceProd"}
#: IR ops with an int8 kernel (the rest run in float between DequantizeLinear/QuantizeLinear)
INT8_OPS = frozenset({"Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "Add", "Sub", "Mul", "Concat",
                      "Relu", "Clip", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Elu", "Gelu",
                      "AveragePool", "GlobalAveragePool"})
#: data-movement ops that run on int8 as they are when input and output share parameters
INT8_SAME_PARAMS = frozenset({"MaxPool", "Reshape", "Transpose", "Pad", "Slice", "Split", "Gather",
                              "ReduceMax", "ReduceMin", "GlobalMaxPool", "Identity"})

IMPORTED_OPS = tuple(sorted(
    set(_UNARY) | set(_BINARY) | set(_REDUCE) | {
        "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "CONCATENATION", "RESHAPE",
        "SQUEEZE", "EXPAND_DIMS", "PAD", "PADV2", "MIRROR_PAD", "MAX_POOL_2D", "AVERAGE_POOL_2D",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "LOG_SOFTMAX", "DEQUANTIZE", "QUANTIZE",
        "DENSIFY", "STRIDED_SLICE", "SLICE", "TRANSPOSE", "SPLIT", "SPLIT_V", "PACK", "GATHER", "CAST",
        "BATCH_MATMUL", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"}))
