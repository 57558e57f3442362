"""``tinyamp.nn``: Module, Parameter, layers, losses, containers, ``init``, ``functional``, ``utils``.

Layers hold parameters and options; the arithmetic is in ``tinyamp.ops``, which
each ``forward`` calls at call time.
"""

from __future__ import annotations

from . import functional, init, utils
from .activation import ELU, GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .dropout import Dropout, Dropout1d, Dropout2d
from .embedding import Embedding
from .flatten import Flatten
from .linear import Identity, Linear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss)
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
# The porting wing's layers (recurrent, attention, transformer) and PyTorch's nn module paths.
from ..porting import modules, parallel
from ..porting.attention import MultiheadAttention
from ..porting.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from ..porting.transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                                   TransformerEncoderLayer)
from ..porting.sync_batchnorm import SyncBatchNorm
from ..porting.vision import (ConstantPad1d, ConstantPad2d, ConstantPad3d, InstanceNorm1d, InstanceNorm2d,
                              InstanceNorm3d, LocalResponseNorm, PixelShuffle, PixelUnshuffle, ReflectionPad1d,
                              ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                              ReplicationPad3d, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d, ZeroPad1d,
                              ZeroPad2d)

__all__ = [
    "Module", "Parameter", "Linear", "Identity", "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d",
    "LayerNorm", "GroupNorm", "Embedding", "Dropout", "Dropout1d", "Dropout2d", "ReLU", "LeakyReLU", "GELU", "SiLU",
    "ELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Flatten", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "Sequential", "ModuleList", "ModuleDict", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "HuberLoss",
    "SmoothL1Loss", "BCELoss", "BCEWithLogitsLoss", "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell",
    "LSTMCell", "GRUCell", "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
    "TransformerDecoderLayer", "TransformerDecoder", "Transformer", "functional", "init", "modules", "parallel",
    "utils", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "LocalResponseNorm", "PixelShuffle", "PixelUnshuffle", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "KLDivLoss",
]
