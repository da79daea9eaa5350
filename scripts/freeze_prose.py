"""Freeze the training prose: the sentences of the standard library's docstrings that `longqa.demo_model.demo_task` draws its
filler from, written to longqa/demo_model/data/prose.txt (one per line, in a fixed order).

Usage: python scripts/freeze_prose.py
Which members belong to a module depends on the Python version and on what was imported before (torch and
transformers replace a few standard-library functions): the shipped file is what the demo model's training saw,
Python 3.11 with torch and transformers imported first, as here. A one-off build script: changing the file changes
every seeded document, the demo model's training data included.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path

import torch  # noqa: F401  (imported first, as in training: see above)
import transformers  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from longqa.demo_model.demo_task import _SENTENCE_RE, PROSE_PATH, _is_prose  # noqa: E402

# Stdlib modules whose docstrings give varied real English prose on any Python install.
_PROSE_MODULES = [
    "abc", "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "cmd", "codecs", "collections",
    "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "email", "email.message", "enum", "fractions", "ftplib", "functools", "gettext", "glob", "gzip",
    "hashlib", "heapq", "hmac", "html.parser", "http.client", "http.cookiejar", "http.server", "imaplib",
    "inspect", "io", "ipaddress", "itertools", "json", "logging", "logging.handlers", "lzma", "mailbox",
    "mimetypes", "multiprocessing", "numbers", "operator", "optparse", "os", "pathlib", "pickle", "pickletools",
    "poplib", "pprint", "pydoc", "queue", "random", "re", "reprlib", "sched", "secrets", "selectors", "shelve",
    "shlex", "shutil", "smtplib", "socket", "socketserver", "sqlite3", "ssl", "statistics", "string", "struct",
    "subprocess", "sysconfig", "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace",
    "traceback", "typing", "unittest", "unittest.mock", "urllib.parse", "urllib.request", "uuid", "warnings",
    "wave", "weakref", "xml.dom.minidom", "xml.etree.ElementTree", "zipfile", "zoneinfo",
]


def _docstrings(module) -> list[str]:
    docs = [inspect.getdoc(module) or ""]
    for _, member in inspect.getmembers(module):
        if getattr(member, "__module__", None) == module.__name__ or inspect.ismodule(member):
            if inspect.isclass(member) or inspect.isfunction(member):
                docs.append(inspect.getdoc(member) or "")
                if inspect.isclass(member):
                    docs.extend(inspect.getdoc(m) or "" for _, m in inspect.getmembers(member, inspect.isfunction))
    return docs



def docstring_sentences() -> list[str]:
    seen: dict[str, None] = {}
    for name in _PROSE_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:  # a module missing from a trimmed Python install is simply skipped
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            docs = _docstrings(module)
        for doc in docs:
            for paragraph in re.split(r"\n\s*\n", doc):
                if paragraph.startswith((" ", "\t")):
                    continue
                flat = " ".join(paragraph.split())
                for sentence in _SENTENCE_RE.split(flat):
                    if _is_prose(sentence):
                        seen.setdefault(sentence, None)
    return list(seen)


if __name__ == "__main__":
    sentences = docstring_sentences()
    PROSE_PATH.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    print(f"wrote {len(sentences)} sentences to {PROSE_PATH}")
