"""Document loaders: plain text and Markdown, HTML, PDF (with pypdf)."""
