"""Neural networks on microcontrollers: Glow bundles for Cortex-M, checked and proven.

``dockerarch bundle`` compiles an ONNX model with Glow's model-compiler (from the image
``dockerarch build glow`` makes) into a bundle (an ARM object, its header and its weights),
checks the object against the MCU it is for (``objcheck``), links it with the firmware kit that
ships here (``kit``) and runs it on QEMU's Cortex-M boards against onnxruntime's outputs for the
same model (``reference``).
"""
