"""CUDA C++ source of the native kernels, one module per topic; `native.kernels_src` joins them."""
