"""Files written whole or not at all: a failed write keeps the old file, leaves no temporary file,
and its error names the file being written."""

import errno

import pytest

from jaxlab.core import atomic


def test_a_failed_write_keeps_the_old_file_and_names_it(tmp_path):
    path = tmp_path / "table.txt"
    path.write_text("old\n")
    with pytest.raises(OSError) as info, atomic.replacing(path) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".txt"
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert info.value.filename == str(path)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.txt"]


def test_an_interrupted_write_leaves_no_file(tmp_path):
    path = tmp_path / "new.json"
    with pytest.raises(KeyboardInterrupt), atomic.replacing(path) as tmp:
        tmp.write_text("{")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    atomic.write_text(path, "{}\n")
    assert path.read_text() == "{}\n"
