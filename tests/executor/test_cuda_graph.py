"""Tests for oxiwork.executor.cuda_graph with a fake driver (no GPU needed).

The fake records every call, so these check what a GPU cannot tell us cheaply: the call
order, that the graph's nodes and dependencies are exactly the lowered description, that
kernel arguments reach the driver with the right bytes, that every resource is released
in order, and that nothing leaks when any call of the construction fails.
"""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest

from oxiwork.builder import GraphBuilder
from oxiwork.error import ExecutionError, GraphError, InvalidArgument
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import _RELEASE_ORDER
from oxiwork.executor.lowering import CTYPES
from oxiwork.node import MemcpyDir
from tests.executor.gpu_fakes import (
    CUresult,
    FakeDriver,
    diamond_graph,
    diamond_plan,
    read_kernel_params,
    simple_plan,
)

RELEASE_RANK = {kind: k for k, (kind, _) in enumerate(_RELEASE_ORDER)} | {"context": 99}


def _construction_calls() -> int:
    fake = FakeDriver()
    CudaGraphExecutor(diamond_plan(), driver=fake).close()
    return fake.names().index("cuCtxSynchronize") - 1  # the close starts with cuCtxSetCurrent


class TestConstruction:
    def test_call_order(self):
        fake = FakeDriver()
        ex = CudaGraphExecutor(diamond_plan(), driver=fake)
        names = fake.names()
        assert names[:2] == ["cuInit", "cuDeviceGetCount"]
        assert names.index("cuCtxSetCurrent") < names.index("cuModuleLoadData")
        assert names.index("cuModuleLoadData") < names.index("cuMemAlloc")
        last_add = max(i for i, n in enumerate(names) if n.startswith("cuGraphAdd"))
        assert last_add < names.index("cuGraphInstantiate") < names.index("cuGraphUpload")
        assert ex.instantiations == 1
        ex.close()

    def test_graph_is_the_description(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            (nodes,) = fake.graph_nodes.values()
            assert len(nodes) == len(ex.desc.nodes)
            kinds = {"kernel": "cuGraphAddKernelNode", "memcpy": "cuGraphAddMemcpyNode"}
            handle_index = {h: i for i, (_, h, _, _) in enumerate(nodes)}
            edges = set()
            for i, ((call, _, deps, _), d) in enumerate(zip(nodes, ex.desc.nodes, strict=True)):
                assert call == kinds[d.kind]
                edges |= {(handle_index[h], i) for h in deps}
            assert edges == set(ex.desc.edges)

    def test_kernel_arguments_reach_the_driver(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            (nodes,) = fake.graph_nodes.values()
            for (call, _, _, rest), d in zip(nodes, ex.desc.nodes, strict=True):
                if call != "cuGraphAddKernelNode":
                    continue
                (params,) = rest
                assert (params.gridDimX, params.blockDimX, params.sharedMemBytes) == (
                    d.grid[0],
                    d.block[0],
                    d.smem,
                )
                got = read_kernel_params(params.kernelParams, [CTYPES[a.ctype][2] for a in d.args])
                want = [
                    ex._memory.resolve(a.value) if a.ctype == "ptr" else a.value for a in d.args
                ]
                assert got == pytest.approx(want)
                arena = ex._memory.arena
                for a, g in zip(d.args, got, strict=True):
                    if a.ctype == "ptr":
                        assert arena <= g < arena + ex.desc.arena_bytes

    def test_copies_use_pinned_host_and_arena_addresses(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            (nodes,) = fake.graph_nodes.values()
            mem = ex._memory
            copies = [rest for call, _, _, rest in nodes if call == "cuGraphAddMemcpyNode"]
            (up, _ctx1), (down, _ctx2) = copies
            assert up.srcHost == mem.host + mem.host_info["in:x"].offset
            assert up.dstDevice == mem.arena + 0
            assert down.dstHost == mem.host + mem.host_info[ex.desc.outputs[0][1]].offset
            assert (up.WidthInBytes, up.Height, up.Depth) == (4096, 1, 1)

    def test_opt_in_for_large_dynamic_shared_memory(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4096)
        b.add_kernel("relu", 4, 256, 64 * 1024).inputs([x]).outputs(
            [b.alloc_buffer("y", 4096)]
        ).finish()
        fake = FakeDriver()
        CudaGraphExecutor(simple_plan(b.build()), driver=fake).close()
        assert "cuFuncSetAttribute" in fake.names()


class TestTeardown:
    def test_close_releases_everything_in_order(self):
        fake = FakeDriver()
        ex = CudaGraphExecutor(diamond_plan(), driver=fake)
        ex.close()
        assert fake.live == {}
        ranks = [RELEASE_RANK[k] for k in fake.destroyed]
        assert ranks == sorted(ranks)
        assert fake.destroyed[0] == "exec" and fake.destroyed[-1] == "context"

    def test_close_is_idempotent_and_use_after_close_raises(self):
        fake = FakeDriver()
        ex = CudaGraphExecutor(diamond_plan(), driver=fake)
        ex.close()
        n = len(fake.calls)
        ex.close()
        assert len(fake.calls) == n
        with pytest.raises(ExecutionError, match="closed"):
            ex.run()

    @pytest.mark.parametrize("fail_at", range(_construction_calls()))
    def test_no_leak_when_any_construction_call_fails(self, fail_at):
        fake = FakeDriver(fail_at=fail_at)
        failing = None
        with pytest.raises(GraphError) as info:
            CudaGraphExecutor(diamond_plan(), driver=fake)
        failing = fake.names()[fail_at]
        assert failing in str(info.value)
        assert fake.live == {}, f"leaked after {failing} failed"

    def test_a_failing_release_does_not_stop_the_others(self):
        fake = FakeDriver(fail={"cuModuleUnload": CUresult.CUDA_ERROR_INVALID_VALUE})
        ex = CudaGraphExecutor(diamond_plan(), driver=fake)
        with pytest.raises(GraphError, match="cuModuleUnload"):
            ex.close()
        assert set(fake.live.values()) == {"module"}


class TestRun:
    def test_inputs_are_staged_in_pinned_memory(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            x = np.arange(1024, dtype=np.float32)
            outputs, timings = ex.run({"x": x})
            region = ex._memory.host_view(ex._memory.host_info["in:x"])
            np.testing.assert_array_equal(region, x)
            assert set(outputs) == {"y"}
            assert timings.gpu_ms == 0.5
            names = fake.names()
            launch = names.index("cuGraphLaunch")
            assert names[launch - 1] == "cuEventRecord" and names[launch + 1] == "cuEventRecord"
            assert names[launch + 2] == "cuStreamSynchronize"

    def test_missing_inputs_are_generated_like_the_simulator(self):
        from oxiwork.reference import generated_input

        plan = diamond_plan()
        with CudaGraphExecutor(plan, driver=FakeDriver()) as ex:
            ex.run(seed=3)
            assert ex.generated_inputs == ("x",)
            region = ex._memory.host_view(ex._memory.host_info["in:x"])
            np.testing.assert_array_equal(
                region, generated_input(plan.graph.buffer_by_name("x"), 3)
            )

    def test_raises_on_unknown_or_misshapen_input(self):
        with CudaGraphExecutor(diamond_plan(), driver=FakeDriver()) as ex:
            with pytest.raises(InvalidArgument, match="'left' is not an uploaded"):
                ex.run({"left": np.zeros(1024)})
            with pytest.raises(InvalidArgument, match="has 3 elements"):
                ex.run({"x": np.zeros(3)})

    def test_external_inputs_are_copied_before_the_launch(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4096)
        y = b.alloc_buffer("y", 4096)
        k = b.add_kernel("relu", 4, 256).inputs([x]).outputs([y]).finish()
        d = b.add_memcpy("down", MemcpyDir.DeviceToHost, 4096, src=y)
        b.chain([k, d])
        fake = FakeDriver()
        with CudaGraphExecutor(simple_plan(b.build()), driver=fake) as ex:
            ex.run({"x": np.ones(1024)})
            names = fake.names()
            copy = names.index("cuMemcpyHtoDAsync")
            assert copy < names.index("cuGraphLaunch")
            assert fake.calls[copy][1][0] == ex._memory.buffers["x"]
            assert fake.calls[copy][1][2] == 4096

    def test_host_callback_errors_surface_after_the_run(self):
        calls = []

        def boom():
            calls.append(1)
            raise ValueError("boom")

        b = GraphBuilder()
        b.add_host_callback("cb", boom)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = b.build()
        fake = FakeDriver()
        with CudaGraphExecutor(simple_plan(g), driver=fake) as ex:
            (nodes,) = fake.graph_nodes.values()
            ((call, _, _, (params,)),) = nodes
            assert call == "cuGraphAddHostNode"
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(params.fn)(None)  # what the GPU would do
            assert calls == [1]
            with pytest.raises(ExecutionError, match="boom"):
                ex.run()


class TestUpdates:
    def test_update_params_patches_the_executable(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            node = ex.update_params("scale", alpha=5.0, grid=8)
            ((name, args),) = [c for c in fake.calls if c[0] == "cuGraphExecKernelNodeSetParams"]
            exec_handle, node_handle, params = args
            assert exec_handle.kind == "exec"
            (nodes,) = fake.graph_nodes.values()
            assert node_handle is nodes[node.index][1]
            types = [CTYPES[a.ctype][2] for a in node.args]
            assert read_kernel_params(params.kernelParams, types)[-1] == 5.0
            assert params.gridDimX == 8
            assert ex.desc.node_for("scale").grid == (8, 1, 1)
            assert "cuGraphInstantiate" not in fake.names()[fake.names().index(name) :]

    def test_update_params_raises_on_unknown_parameter_or_node_kind(self):
        with CudaGraphExecutor(diamond_plan(), driver=FakeDriver()) as ex:
            with pytest.raises(InvalidArgument, match=r"no parameter 'beta'.*alpha"):
                ex.update_params("scale", beta=1.0)
            with pytest.raises(InvalidArgument, match="memcpy node"):
                ex.update_params("upload", n=3)

    def test_same_topology_updates_in_place(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            g = diamond_graph()
            scale = next(n for n in g.nodes if n.name == "scale")
            g2 = g.with_changes(
                nodes=[n.replace(params=(("alpha", 7.0),)) if n is scale else n for n in g.nodes]
            )
            assert ex.update(simple_plan(g2, {"neg": 1})) == "updated"
            assert ex.instantiations == 1
            assert fake.names().count("cuGraphExecUpdate") == 1
            assert fake.live_kinds()["exec"] == 1
            assert fake.live_kinds()["graph"] == 2  # the exec's source and the latest
            ex.update_params("scale", alpha=1.0)
        assert fake.live == {}

    def test_new_topology_reinstantiates(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            assert ex.update(simple_plan(diamond_graph())) == "reinstantiated"
            assert ex.instantiations == 2
            assert fake.live_kinds()["exec"] == 1 and fake.live_kinds()["graph"] == 1
            ex.run()
        assert fake.live == {}

    def test_update_loads_only_new_modules(self):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            loads = fake.names().count("cuModuleLoadData")
            ex.update(diamond_plan())
            assert fake.names().count("cuModuleLoadData") == loads

    def test_one_module_per_unit(self):
        fake = FakeDriver()
        from oxiwork.executor import lowering

        plan = diamond_plan()
        units = len(lowering.lower(plan, kernels_per_module=1).modules)
        with CudaGraphExecutor(plan, driver=fake):
            assert fake.names().count("cuModuleLoadData") == 1  # default: one unit
        assert units == 4

    def test_failed_update_falls_back_to_reinstantiation(self):
        fake = FakeDriver(update_ok=False)
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            assert ex.update(diamond_plan()) == "reinstantiated"
        assert fake.live == {}

    def test_to_dot_passes_a_bytes_path(self, tmp_path):
        fake = FakeDriver()
        with CudaGraphExecutor(diamond_plan(), driver=fake) as ex:
            ex.to_dot(str(tmp_path / "g.dot"))
        ((_, args),) = [c for c in fake.calls if c[0] == "cuGraphDebugDotPrint"]
        assert args[1] == str(tmp_path / "g.dot").encode()
