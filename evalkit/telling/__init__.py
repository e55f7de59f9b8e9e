"""Telling: pages, the index and CI outputs, from what earlier steps wrote.

The failures view (`failures`), what notebooks call (`nb`), reports executed and rendered
(`reports`) with their index (`report_index`), human labels for the judge (`labelling`),
trajectories side by side (`replay`), JUnit XML and Markdown (`ciout`), and that
Markdown as a suite's pull-request comment (`prcomment`), and the CI workflow recipe
`evalkit init --ci github` writes (`workflow`).

May import: every folder above it, up to `conclusions`.
"""
