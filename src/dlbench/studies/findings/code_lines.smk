# The lines of framework-specific code per workload and framework, next to its speed
# (scripts/code_lines.py says what it counts, and how). Every counted file is an input, so that
# editing a module counts again; the script stops if it counts a file that is not one.
from dlbench.frameworks import adapter_module

CODE_LINES_SCRIPT = Path(workflow.current_basedir) / "scripts" / "code_lines.py"
# the configured run sets with framework modules of their own (not the memory pass's: it runs its workloads')
CODE_LINES_SETS = [name for name, (_, run_set) in RUN_SETS.items()
                   if run_set.subject == "framework" and run_set.runs_as is None]


# each set's framework modules and task.py, and each framework's adapter package
CODE_LINES_FILES = [local(path) for path in sorted({str(path) for path in [
    SRC.joinpath(*workload_module(name, framework).split(".")).with_suffix(".py")
    for name in CODE_LINES_SETS for framework in [*FRAMEWORKS, None]] + [
    path for framework in FRAMEWORKS for path in SRC.joinpath(*adapter_module(framework).split(".")).glob("*.py")]
    if path.exists()})]


rule code_lines:
    output:
        figure=report("results/figures/findings/code-lines.png", caption="report/code-lines.rst", category="findings",
                      labels={"figure": "lines of framework-specific code, next to speed"}),
        table=report("results/tables/findings-code-lines.csv", caption="report/code-lines.rst", category="findings",
                     labels={"table": "lines of framework-specific code"}),
    input:
        counted=CODE_LINES_FILES,
        points=[f"results/tables/{name}-points.csv" for name in CODE_LINES_SETS],
        **script_inputs(CODE_LINES_SCRIPT),
        python=env_input("report"),
    params:
        python=run_python,
        src=lambda wildcards: str(SRC),
        workloads=[*WORKLOADS, *STUDIES],
        frameworks=FRAMEWORKS,
    log:
        "results/logs/report/findings-code-lines.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --src {params.src:q} --workloads {params.workloads:q}"
        " --frameworks {params.frameworks:q} --points {input.points:q} --inputs {input.counted:q}"
        " --table {output.table:q} --figure {output.figure:q} > {log:q} 2>&1"
