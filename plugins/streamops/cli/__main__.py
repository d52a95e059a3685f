"""`python -m streamops.cli`: how the supervisor and the background generators are started."""

from streamops.cli import app

app()
