"""The porting wing: PyTorch surface beyond the AMP path, re-exported under PyTorch's public names.

Each module here is composed of tinyamp ops and modules; ``tinyamp.nn``,
``tinyamp.nn.functional``, ``tinyamp.optim`` and ``tinyamp.utils`` re-export its
names (``ta.nn.InstanceNorm2d``, ``ta.optim.LBFGS``), so code ports by the import.
"""
