"""The names images go by, for the image area (which gives them) and the runs area (which runs them).

- image_tag: the tag `image.build` gives a target, e.g. rocmci/vllm-rocm:test-gfx942-gfx950;
- configured_image: the image workloads use, the 'image' setting or else the test image's tag.

A leaf below both areas, so neither imports the other's services to agree on a name.
"""

from __future__ import annotations

from rocmci import arch as archmod
from rocmci.values import image_ref


def image_tag(image_repo: str, target: str, archs: tuple[str, ...], vllm_archs: tuple[str, ...] | None) -> str:
    """A tag that says what is inside, e.g. rocmci/vllm-rocm:test-gfx942-gfx950 (labels hold the rest)."""
    tag = f"{target.replace('_', '-')}-{archmod.slug(archs)}"
    if vllm_archs and vllm_archs != archs:
        tag += f"-vllm-{archmod.slug(vllm_archs)}"
    return f"{image_repo}:{tag[:128]}"


def configured_image(s) -> str:
    """The image workloads use: the 'image' setting, else the tag `image.build` gives the test image."""
    if s.image:
        return image_ref(f"image ({s.origin('image')})", s.image)
    # Named with their origin (env ROCMCI_VLLM_ARCH, pyproject, ...): a bad value here is a setting the user gave.
    vllm_archs = (
        archmod.parse_arch_list(s.vllm_arch, what=f"vllm_arch ({s.origin('vllm_arch')})") if s.vllm_arch else None
    )
    archs = archmod.parse_arch_list(s.require("arch"), what=f"arch ({s.origin('arch')})")
    return image_tag(s.image_repo, "test", archs, vllm_archs)
