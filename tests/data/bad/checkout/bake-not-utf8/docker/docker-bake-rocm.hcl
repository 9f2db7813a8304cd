variable "PYTORCH_ROCM_ARCH" {
  default = "gfx942é"
}
