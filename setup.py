"""The build's one mapping: the repository's top-level data folders ship inside the ``nas`` package.

``conf/``, ``search_spaces/`` and ``latency_tables/`` sit beside ``nas/`` in the repository; a wheel
holds them as ``nas/conf/``, ``nas/search_spaces/`` and ``nas/latency_tables/`` (package data, found
through ``nas.resources``).  Each folder, and each folder under it, becomes a data-only package whose
source directory is the top-level one.  Everything else is in pyproject.toml.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
DATA = {"conf": "*.yaml", "search_spaces": "*.yaml", "latency_tables": "*.json"}  # folder -> the files it ships

packages = find_packages(include=["nas", "nas.*"])
package_dir = {}
package_data = {}
for folder, pattern in DATA.items():
    # the folders holding shipped files: not a hidden one (a table's .locks/), not one holding none
    for d in sorted(p for p in [HERE / folder, *(HERE / folder).rglob("*")]
                    if p.is_dir() and not any(part.startswith((".", "__")) for part in p.relative_to(HERE).parts)
                    and any(p.glob(pattern))):
        name = ".".join(["nas", *d.relative_to(HERE).parts])
        packages.append(name)
        package_data[name] = [pattern]
    package_dir[f"nas.{folder}"] = folder

setup(packages=packages, package_dir=package_dir, package_data=package_data)
