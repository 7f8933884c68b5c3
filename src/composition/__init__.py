"""The composition root: the one place that names concrete adapters (`container`), and the
public models built from it (`api`), plus the capture names wired to their HTTP hook."""
