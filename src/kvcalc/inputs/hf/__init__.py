"""Hugging Face configs: ``configs`` reads a config.json into a ModelSpec, ``guard`` names the
fields it cannot model, ``dims`` the widths a forward pass needs, ``families`` one module each."""
