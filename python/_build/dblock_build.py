"""A PEP 517 build backend for the pure-Python package dblock, in the tree
so that building needs nothing from an index (pip's isolated build
environment stays empty): it writes the wheel (and the sdist) with zipfile
and tarfile. It knows this one package only: dblock/*.py and py.typed.

Hooks: build_wheel, build_sdist, build_editable (PEP 660: a .pth file
pointing at this folder), and the optional get_requires_* (nothing).
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "dblock"


def _meta():
    text = open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8").read()
    get = lambda k: re.search(r'^%s\s*=\s*"([^"]*)"' % k, text, re.M).group(1)  # noqa: E731
    return get("name"), get("version"), get("description"), get("requires-python")


def _metadata():
    name, version, summary, requires = _meta()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            "License: MIT\n" % (name, version, summary, requires))


def _files():
    """(path in the archive, path on disk) of the package's files."""
    src = os.path.join(HERE, PKG)
    for f in sorted(os.listdir(src)):
        if f.endswith(".py") or f == "py.typed":
            yield "%s/%s" % (PKG, f), os.path.join(src, f)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _wheel(wheel_directory, entries):
    name, version = _meta()[:2]
    dist = "%s-%s.dist-info" % (name, version)
    fname = "%s-%s-py3-none-any.whl" % (name, version)
    entries = list(entries) + [
        (dist + "/METADATA", _metadata().encode()),
        (dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: dblock_build\nRoot-Is-Purelib: true\n"
                          b"Tag: py3-none-any\n"),
    ]
    record = [_record_line(a, d) for a, d in entries] + [dist + "/RECORD,,"]
    entries.append((dist + "/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            z.writestr(zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0)), data,
                       zipfile.ZIP_DEFLATED)
    return fname


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, ((a, open(p, "rb").read()) for a, p in _files()))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [("dblock_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name, version = _meta()[:2]
    base = "%s-%s" % (name, version)
    fname = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz") as t:
        members = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
                   ("_build/dblock_build.py", os.path.abspath(__file__))] + list(_files())
        for arcname, path in members:
            t.add(path, arcname="%s/%s" % (base, arcname))
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return fname
