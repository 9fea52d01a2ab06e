"""Regenerates ``stdlib_docstrings.txt.gz``: docstrings of a fixed list of standard-library modules.

Run ``python -m jaxlab.lm.corpus.make_corpus`` (the shipped file was made with CPython 3.11.7).
Sources are parsed with :mod:`ast` (nothing is imported or executed). Every module, class,
function and method docstring becomes one document::

    <module>.<qualified name>
    <docstring, cleaned by ast.get_docstring>

Documents are written in module-list order and source order, joined by
``DOCUMENT_SEPARATOR``, UTF-8 encoded and gzip'ed with a zero timestamp, so the output is
byte-identical for the same Python version.
"""

import argparse
import ast
import gzip
import io
import pathlib
import sysconfig

DOCUMENT_SEPARATOR = "\n\x1e\n"
"""Separator between documents: the ASCII record separator on its own line."""

FILE_NAME = "stdlib_docstrings.txt.gz"

MODULES = (
    "typing", "doctest", "difflib", "inspect", "ipaddress", "statistics", "threading",
    "configparser", "codecs", "tarfile", "os", "subprocess", "shutil", "argparse", "traceback",
    "zipfile", "functools", "collections/__init__", "heapq", "bisect", "random", "fractions",
    "logging/__init__", "json/__init__", "json/decoder", "json/encoder", "textwrap", "string",
    "pathlib", "tempfile", "contextlib", "dataclasses", "enum", "abc", "copy", "pprint",
    "calendar", "csv", "glob", "fnmatch", "locale", "queue", "sched", "socket", "selectors",
    "base64", "hmac", "uuid", "weakref", "warnings", "numbers", "operator", "ast", "dis",
    "tokenize", "pickle", "re/__init__", "urllib/parse", "http/client",
)  # fmt: skip
"""Module files (relative to the stdlib directory, without ``.py``), in output order."""


def module_documents(source: str, module: str) -> list[str]:
    """Returns the docstring documents of one module's source, in source order.

    Args:
        source: Python source text.
        module: dotted module name used in the document headers.

    Returns:
        ``"<module>.<qualname>\\n<docstring>"`` strings (the module's own is headed ``<module>``).
    """
    documents: list[str] = []

    def visit(node: ast.AST, qualname: str) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc and "\x1e" not in doc:
            documents.append(f"{qualname}\n{doc.strip()}")
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{qualname}.{child.name}")

    visit(ast.parse(source), module)
    return documents


def build_corpus(stdlib: pathlib.Path) -> list[str]:
    """Collects the documents of every module in :data:`MODULES` that exists under ``stdlib``.

    Args:
        stdlib: the standard-library directory.

    Returns:
        The documents, in order.
    """
    documents: list[str] = []
    for name in MODULES:
        path = stdlib / f"{name}.py"
        if not path.is_file():
            continue
        dotted = name.removesuffix("/__init__").replace("/", ".")
        documents.extend(module_documents(path.read_text(encoding="utf-8"), dotted))
    return documents


def write_corpus(documents: list[str], out: pathlib.Path) -> int:
    """Writes the gzip'ed corpus deterministically (``mtime = 0``, no file name in the header).

    Args:
        documents: the documents.
        out: output path.

    Returns:
        Size of the uncompressed text in bytes.
    """
    data = DOCUMENT_SEPARATOR.join(documents).encode("utf-8")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    out.write_bytes(buffer.getvalue())
    return len(data)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path(__file__).with_name(FILE_NAME)
    )
    parser.add_argument(
        "--stdlib", type=pathlib.Path, default=pathlib.Path(sysconfig.get_paths()["stdlib"])
    )
    args = parser.parse_args()
    documents = build_corpus(args.stdlib)
    size = write_corpus(documents, args.out)
    print(
        f"{len(documents)} documents, {size} bytes uncompressed, "
        f"{args.out.stat().st_size} bytes compressed -> {args.out}"
    )


if __name__ == "__main__":
    main()
