"""image/requests (issue 35): a repository pin with credentials in its URL is refused in one line that shows the
URL without them, before it can become a build arg or a label stored in the image."""

from __future__ import annotations

import pytest

from rocmci.errors import UsageError
from rocmci.image import requests

TOKEN = "ghp_" + "A1b2C3d4" * 5


def test_a_pin_with_url_credentials_is_refused_showing_the_url_without_them():
    with pytest.raises(UsageError) as err:
        requests._no_credentials("deepep_repo", f"https://x-access-token:{TOKEN}@github.com/ROCm/DeepEP.git", "env X")
    assert err.value.message == (
        "deepep_repo (env X) holds credentials in its URL (https://***@github.com/ROCm/DeepEP.git); rocmci never "
        "passes them as a build arg or label, where the image would keep them"
    )
    assert err.value.hint == (
        "give the URL without them and let git authenticate through a credential helper, "
        "or pass the token as a BuildKit secret (--secret) in your own build"
    )
    assert TOKEN not in err.value.one_line()


def test_a_pin_without_credentials_is_kept_as_given():
    url = "https://github.com/ROCm/DeepEP.git"
    assert requests._no_credentials("deepep_repo", url, "pyproject") == url
