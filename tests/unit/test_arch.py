from __future__ import annotations

import pytest

from rocmci import arch
from rocmci.errors import UsageError


@pytest.mark.parametrize(
    "text",
    ["gfx942;gfx950", "gfx942,gfx950", " gfx950 ; gfx942 ", "GFX942;gfx950;gfx942", "gfx950 gfx942", "gfx942,,gfx950;"],
)
def test_spellings_normalise_to_one_canonical_form(text):
    assert arch.canonical(arch.parse_arch_list(text)) == "gfx942;gfx950"


def test_order_is_by_generation():
    assert arch.parse_arch_list("gfx1100;gfx950;gfx90a;gfx942") == ("gfx90a", "gfx942", "gfx950", "gfx1100")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        (" ; ", "is empty"),
        ("gfx942; rm -rf /", r"contains '-'"),
        ("$(id)", r"contains '\$'"),
        ("`id`", "contains '`'"),
        ("gfx942\ngfx950", r"contains '\\n'"),
        ("sm_90", "contains '_'"),
        ("gfx94", "'gfx94' is not a gfx target"),
        ("942", "'942' is not a gfx target"),
        ("gfx942:sramecc+:xnack-", "target feature suffix"),
    ],
)
def test_bad_lists_are_rejected_in_one_line(text, message):
    with pytest.raises(UsageError, match=message) as err:
        arch.parse_arch_list(text)
    assert "\n" not in err.value.one_line()
    assert err.value.exit_code == 2


def test_deepep_support_names_the_supported_archs_and_products():
    arch.require_deepep_support(("gfx942", "gfx950"))
    with pytest.raises(UsageError) as err:
        arch.require_deepep_support(("gfx90a", "gfx942"))
    line = err.value.one_line()
    assert "gfx90a (MI210/MI250/MI250X)" in line
    assert "gfx942 (MI300A/MI300X/MI325X)" in line and "gfx950 (MI350X/MI355X)" in line


def test_native_uses_host_archs():
    assert arch.resolve_arch_list("native", host_archs=["gfx950", "gfx942", "gfx942"]) == ("gfx942", "gfx950")
    with pytest.raises(UsageError, match="found no AMD GPU"):
        arch.resolve_arch_list("native", host_archs=[])
    assert arch.resolve_arch_list("gfx942") == ("gfx942",)


def test_slug_has_no_semicolon():
    assert arch.slug(("gfx942", "gfx950")) == "gfx942-gfx950"
