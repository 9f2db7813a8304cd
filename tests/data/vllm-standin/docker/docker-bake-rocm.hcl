# Stand-in for vLLM's docker/docker-bake-rocm.hcl (tests only): the arch list vLLM itself is built for.
variable "PYTORCH_ROCM_ARCH" {
  default = "gfx90a;gfx942;gfx950"
}
