"""The dependency graph: spec, oracle and target nodes feed one artifact node per (kernel, target);
component artifacts feed the artifacts of the kernels that use them."""

from __future__ import annotations

import json

import networkx as nx


def build_graph(project, kernels=None, targets=None) -> nx.DiGraph:
    g = nx.DiGraph()
    for spec, target in project.pairs(kernels, targets):
        if project.applies(spec, target):
            continue
        art = f"artifact:{spec.name}@{target.name}"
        g.add_node(f"spec:{spec.name}", kind="spec", path=f"specs/{spec.name}.yaml")
        g.add_node(f"oracle:{spec.name}", kind="oracle", path=f"oracles/{spec.name}.py")
        g.add_node(f"target:{target.name}", kind="target", path=f"targets/{target.name}.yaml")
        g.add_node(art, kind="artifact", kernel=spec.name, target=target.name)
        g.add_edge(f"spec:{spec.name}", art, key="generate")
        g.add_edge(f"target:{target.name}", art, key="generate+compile")
        g.add_edge(f"oracle:{spec.name}", art, key="verify")
        for comp in spec.components:
            g.add_edge(f"artifact:{comp}@{target.name}", art, key="generate")
    return g


def to_dot(g: nx.DiGraph) -> str:
    shapes = {"spec": "note", "oracle": "component", "target": "box3d", "artifact": "box"}
    lines = ["digraph regen {", "  rankdir=LR;"]
    for n, data in sorted(g.nodes(data=True)):
        lines.append(f'  "{n}" [shape={shapes.get(data.get("kind"), "ellipse")}];')
    for a, b, data in sorted(g.edges(data=True)):
        lines.append(f'  "{a}" -> "{b}" [label="{data.get("key", "")}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_json(g: nx.DiGraph) -> str:
    return json.dumps({"nodes": [{"id": n, **d} for n, d in sorted(g.nodes(data=True))],
                       "edges": [{"from": a, "to": b, **d} for a, b, d in sorted(g.edges(data=True))]},
                      indent=1)
