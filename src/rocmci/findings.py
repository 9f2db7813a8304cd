"""A finding: where (file:line:col), which rule, how bad, what to do; plus the source step it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rocmci.yamldoc import Document, Path_

ERROR = "error"
WARNING = "warning"


class Finding(NamedTuple):
    file: str
    line: int
    col: int
    rule: str
    severity: str
    message: str
    origin: str | None = None  # for a generated step: the source step's file:line
    fix: str | None = None  # what to change, where a rule knows it

    @classmethod
    def at(cls, doc: Document, path: Path_, rule: str, severity: str, message: str, origin: str | None = None):
        pos = doc.pos(path)
        return cls(doc.filename, pos.line, pos.col, rule, severity, message, origin)

    def text(self) -> str:
        tail = f" (from {self.origin})" if self.origin else ""
        return f"{self.file}:{self.line}:{self.col}: {self.severity} [{self.rule}] {self.message}{tail}"

    def as_dict(self) -> dict:
        return self._asdict()
