"""Vector stores: sqlite-vec in the kernel's database and LanceDB folders per namespace."""
