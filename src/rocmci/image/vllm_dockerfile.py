"""vLLM's docker/Dockerfile.rocm as the image area reads it.

The reader itself lives in rocmci/checkout.py, a shared leaf, so that the settings registry can take
pins from a checkout without depending on this area; the image code keeps its short `vd.` names.
"""

from __future__ import annotations

from rocmci.checkout import (  # noqa: F401 (re-exported)
    ARCH_ARG,
    BAKE_FILE,
    BASE_DOCKERFILE,
    DEEPEP_STAGE,
    DOCKERFILE,
    MAX_FILE_BYTES,
    ROCSHMEM_STAGE,
    VLLM_ARCH_ARG,
    ArgDecl,
    CheckoutValues,
    Instruction,
    SetupCall,
    Stage,
    VllmDockerfile,
    bake_variable,
    deepep_setup_call,
    expand,
    load,
    parse,
)
