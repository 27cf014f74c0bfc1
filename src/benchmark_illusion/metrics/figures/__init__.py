"""Figures of the metric tables in results/illusion.duckdb and of the concept tables (PNG, one
file per figure); metrics.steps.make_figures writes them.

Every figure has one row of panels per model and uses the pooled rows of the tables
(dataset = 'all', lang = 'all') unless it is about languages. Error bars are the tables' 95%
bootstrap intervals. The captions shown in the Snakemake report live in workflow/report/.
"""
