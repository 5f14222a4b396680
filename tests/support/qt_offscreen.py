"""Making PySide6's offscreen platform work on a Debian machine, for the Qt example's test.

The PySide6 wheels bundle Qt but not the system libraries Qt links to. Qt's offscreen
platform (``QT_QPA_PLATFORM=offscreen``) needs no display, but QtGui and QtWidgets still load
EGL/GL (libglvnd), xkbcommon, fontconfig, freetype, GLib and D-Bus (found with ``ldd`` on
the wheel's ``libQt6Gui``, ``libQt6Widgets``, ``libQt6DBus`` and ``libqoffscreen``; X11 comes
with libGL). A test machine that lacks them gets them from Debian with ``apt-get`` (the
machines run as root); if that fails, the test fails and says why, it is never skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

DEBIAN_PACKAGES = (
    "libegl1",
    "libgl1",
    "libxkbcommon0",
    "libfontconfig1",
    "libfreetype6",
    "libglib2.0-0",
    "libdbus-1-3",
    "libx11-6",
)
"""What PySide6's QtWidgets needs on the offscreen platform, besides the base system."""

PROBE = """
from PySide6.QtWidgets import QApplication, QPushButton
app = QApplication([])
button = QPushButton("probe")
button.show()
app.processEvents()
print("offscreen Qt works")
"""


class OffscreenQtUnavailable(RuntimeError):
    """The offscreen Qt platform cannot run here; the message says why and what was tried."""


def _probe() -> subprocess.CompletedProcess[str]:
    # In a child process: a library missing now must not poison this process's imports.
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _missing_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return list(DEBIAN_PACKAGES)
    return [
        package
        for package in DEBIAN_PACKAGES
        if subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        != "install ok installed"
    ]


def _apt_get(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", *arguments],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def ensure_offscreen_qt() -> None:
    """Return once a Qt window can be shown offscreen, installing Debian libraries if needed.

    Raises:
        OffscreenQtUnavailable: PySide6 is not installed, or the libraries could not be
            installed, or Qt still does not start (with the output of each step).
    """
    probe = _probe()
    if probe.returncode == 0:
        return
    if "No module named 'PySide6'" in probe.stderr:
        raise OffscreenQtUnavailable(
            "PySide6 is not installed: install the dev extra (pip install -e '.[dev]'), "
            "which includes the qt extra"
        )
    missing = _missing_packages()
    if not missing:
        raise OffscreenQtUnavailable(
            f"the offscreen Qt platform does not start, and every package of "
            f"{DEBIAN_PACKAGES} is installed:\n{probe.stderr[-3000:]}"
        )
    if shutil.which("apt-get") is None:
        raise OffscreenQtUnavailable(
            f"Qt needs {missing} (not installed) and there is no apt-get to install them:\n"
            f"{probe.stderr[-3000:]}"
        )
    install = _apt_get("install", "-y", "--no-install-recommends", *missing)
    if install.returncode != 0:
        # A fresh machine may have no package lists yet.
        update = _apt_get("update")
        install = _apt_get("install", "-y", "--no-install-recommends", *missing)
        if install.returncode != 0:
            raise OffscreenQtUnavailable(
                f"apt-get could not install {missing} (run as root, with Debian reachable):\n"
                f"apt-get update: {update.stderr[-2000:]}\n"
                f"apt-get install: {install.stderr[-2000:]}"
            )
    probe = _probe()
    if probe.returncode != 0:
        raise OffscreenQtUnavailable(
            f"installed {missing}, but the offscreen Qt platform still does not start:\n"
            f"{probe.stderr[-3000:]}"
        )
