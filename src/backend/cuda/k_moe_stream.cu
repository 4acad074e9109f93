// Placeholder: filled in this session (issue 9).
namespace deepinfer::backend::cuda::kernels {}
