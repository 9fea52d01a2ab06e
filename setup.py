"""Ships ``benchmarks/`` as the sub-package ``jaxlab.benchmarks`` so ``jaxlab bench AREA`` runs
from an installed copy. ``[tool.setuptools]`` in pyproject cannot combine a ``find`` of the
``jaxlab`` tree (namespace packages included: the preset and level folders carry no
``__init__.py``) with an extra package from another folder, so the package list is made here;
everything else lives in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["jaxlab*"]), "jaxlab.benchmarks"],
    package_dir={"jaxlab.benchmarks": "benchmarks"},
)
