"""The demos of seeds 000 and 001, their stand-in services and the terminal commands that drive
them. The top layer: it uses every app below it and nothing imports it (.importlinter); its
python tools reach the registry by name, through AGENTRY_TOOL_MODULES."""
