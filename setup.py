"""Map the repository's top-level folders onto the single import name `specdeck`.

The repository keeps core/, gui/ and resources/ at its top level (the product's layout),
but the installed distribution must expose only `specdeck` (specdeck.core, specdeck.gui,
specdeck.resources): generic top-level names such as `core` would collide with other
software. Sub-packages are discovered so that a new folder can never be left out.
"""

from setuptools import find_namespace_packages, find_packages, setup

ROOTS = {
    "specdeck": "specdeck",
    "specdeck.core": "core",
    "specdeck.gui": "gui",
    "specdeck.resources": "resources",
}


def _packages() -> list[str]:
    names = []
    for name, folder in ROOTS.items():
        names.append(name)
        # Data folders under resources/ have no __init__.py: they are namespace packages.
        finder = find_namespace_packages if name == "specdeck.resources" else find_packages
        names.extend(f"{name}.{sub}" for sub in finder(folder, exclude=["__pycache__*"]))
    return names


setup(packages=_packages(), package_dir=dict(ROOTS))
