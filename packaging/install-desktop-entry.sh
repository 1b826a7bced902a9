#!/usr/bin/env sh
# Add SpecDeck to the desktop's application menu for the current user.
# Usage: packaging/install-desktop-entry.sh [PATH_TO_SPECDECK_EXECUTABLE]
set -eu
here=$(dirname "$0")
exe=${1:-$(command -v specdeck || true)}
if [ -z "$exe" ]; then
    echo "specdeck is not on PATH; pass the executable's path (e.g. .venv/bin/specdeck)." >&2
    exit 2
fi
apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
icons="${XDG_DATA_HOME:-$HOME/.local/share}/icons/hicolor/scalable/apps"
mkdir -p "$apps" "$icons"
cp "$here/specdeck.svg" "$icons/specdeck.svg"
sed -e "s|^Exec=.*|Exec=$exe|" -e "s|^TryExec=.*|TryExec=$exe|" "$here/specdeck.desktop" > "$apps/specdeck.desktop"
echo "Installed $apps/specdeck.desktop (Exec=$exe)"
