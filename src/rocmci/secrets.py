"""Which names hold secrets, and keeping their values out of everything rocmci prints or writes."""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)|_KEY$|^KEY$", re.I)


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


class Redactor:
    """Replaces the values of secret-looking variables with *** in any text."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.values = sorted({v for k, v in env.items() if is_secret(k) and len(v) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, "***")
        return text
