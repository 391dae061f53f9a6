// Compiled once at configure time (common/meson.build): does nvcc work with this host compiler?
__global__ void tandem_nvcc_trial(int* x) { *x = 1; }
