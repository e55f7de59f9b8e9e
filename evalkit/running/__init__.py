"""Running: k samples per case and arm, under the cost cap.

The sampling engine (`runner`), the stop once a run's test has decided (`until_decided`),
agents as the unit under test (`agents`), and runs and gradings through a provider's Batch
API (`batch`).

May import: every folder above it: `foundations`, `numbers`, `checking`, `suites`, `runfolder`,
`pii`, `prompts`, `datasets`, `intake`, `calls`, `conversations`.
"""
