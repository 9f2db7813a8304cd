from __future__ import annotations

import os

import pytest

from rocmci.errors import InputError
from rocmci.files import read_lines, write_atomic


def test_write_replaces_whole_files(tmp_path):
    path = tmp_path / "sub" / "out.yaml"
    write_atomic(path, "one\n")
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n"
    assert [p.name for p in path.parent.iterdir()] == ["out.yaml"]


def test_a_failure_mid_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.yaml"
    path.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(path, "new\n" * 1000)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_interrupt_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "out.yaml"
    path.write_text("old\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_unwritable_folder_is_an_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        write_atomic(blocker / "out.yaml", "x")


def test_read_lines_skips_blanks_and_comments(tmp_path):
    path = tmp_path / "changed.txt"
    path.write_text("a/b.py\n\n  # comment\n c/d.py \n")
    assert read_lines(path) == ("a/b.py", "c/d.py")
    with pytest.raises(InputError, match="no such file"):
        read_lines(tmp_path / "none")
