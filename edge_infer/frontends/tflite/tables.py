"""TFLite builtin -> IR op tables (what stays int8: ``ops/int8.py``, asked by ``importer.int8_ok``)."""

_UNARY = {"LOGISTIC": "Sigmoid", "RELU": "Relu", "TANH": "Tanh", "HARD_SWISH": "HardSwish",
          "EXP": "Exp", "ABS": "Abs", "NEG": "Neg", "SQRT": "Sqrt", "RSQRT": None, "FLOOR": "Floor",
          "CEIL": "Ceil", "ELU": "Elu", "LOG": "Log", "SIN": "Sin", "COS": "Cos", "ROUND": "Round",
          "SQUARE": None, "GELU": "Gelu", "LEAKY_RELU": "LeakyRelu", "RELU6": "Clip",
          "RELU_N1_TO_1": "Clip", "RELU_0_TO_1": "Clip"}
_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min",
           "POW": "Pow", "SQUARED_DIFFERENCE": None, "PRELU": "PRelu"}
_REDUCE = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
           "REDUCE_PROD": "ReduceProd"}
IMPORTED_OPS = tuple(sorted(
    set(_UNARY) | set(_BINARY) | set(_REDUCE) | {
        "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "CONCATENATION", "RESHAPE",
        "SQUEEZE", "EXPAND_DIMS", "PAD", "PADV2", "MIRROR_PAD", "MAX_POOL_2D", "AVERAGE_POOL_2D",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "LOG_SOFTMAX", "DEQUANTIZE", "QUANTIZE",
        "DENSIFY", "STRIDED_SLICE", "SLICE", "TRANSPOSE", "SPLIT", "SPLIT_V", "PACK", "GATHER", "CAST",
        "BATCH_MATMUL", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"}))
