"""Private keys and tokens in a run's code folder, which Azure ML uploads as the run's snapshot.

Azure ML copies the whole ``code`` folder into the workspace's storage, where everyone with access to
the workspace can read it. :func:`scan` reads all of it (:mod:`analysis.secret_scan`: every file, every
folder, bounded by a byte budget that names what it could not read) and reports relative paths only,
never content. It does not read ``.amlignore``/``.gitignore``: a key that is ignored is still reported,
because removing it is safer than relying on an ignore rule. Symbolic links that lead outside the
folder are never followed: the folder is untrusted input, and a link to ``/etc`` is not the run's code.
"""

from __future__ import annotations

from pathlib import Path

from analysis.secret_scan import FolderScan, scan_folder
from kernel.paths import links_outside


def scan(folder: Path) -> FolderScan:
    """What ``folder`` holds that must not be uploaded (sorted relative paths), and what was not read in full.

    Symbolic links that lead outside ``folder`` are not read (:func:`outside_links` names them)."""
    return scan_folder(folder)


def outside_links(folder: Path) -> tuple[str, ...]:
    """Symbolic links in ``folder`` that lead outside it: neither scanned nor uploaded (relative, sorted)."""
    return links_outside(folder)
