"""The size budget of STYLE.md, counted as tinygrad counts it: code lines only, per folder.

A line counts when it holds a token of code. Blank lines, comment lines and docstrings (the
string that opens a module, class or function) do not count, so an explanation never
competes with code for room, and cutting one never makes room. A line that mixes code and a
trailing comment counts once; every line of a multi-line statement or string that is not a
docstring counts. Each folder of the package ("." is the top-level modules) keeps within its
own budget, and the core (tensors, ops, autograd, graphs, capture, passes, codegen, kernels
and the top-level modules) within ``CORE_BUDGET``, so that a folder that grows shows up here
and is either made simpler or given a larger budget on purpose, with the reason, in the
same commit as the code that needs it.

>>> code_lines("'''Doc.'''\\n\\n# why\\nx = 1  # counted once\\n")
1
"""
import ast
import functools
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dualgraph"
# Code lines per folder ("." is the top-level modules) and for the core: the sizes once
# op facts, ONNX rules, lowering rules and CPU tuning had their final homes (ops/ holds each
# op's ONNX export and import rule, passes/ the lowering rule table, kernels/ the tuning
# module), plus about 6% room. A folder that needs more gets it in the commit that needs
# it, with the reason beside the number. capture/ +200: the guards on the Python values a
# capture reads (capture/pyvalues.py) and eager's errors for a compiled call's failures.
# ".", "backends", ops/ and optim/ grew by the torch names real programs use: CPU-only
# device queries (dg.device, dg.cuda, dg.accelerator, dg.backends), top-level names, the
# missing ops and Tensor methods (atan2, erfc, unfold, new_zeros, ...), and Adadelta,
# Adamax, NAdam, RAdam, Rprop, ASGD, LBFGS and two schedulers. export/ +270: every ONNX
# node checked against its schema before it is converted (export/onnx_check.py). "."
# +100: loaders that raise their own error for any input, saves atomic as a whole (io.py,
# _helpers.py). capture/ +200 more: updates through .data captured, state a step creates
# kept (capture/escape.py), and a compiled module that stands in for the module. utils/
# +240: the DataLoader's worker processes (utils/workers.py). ops/ holds writes through
# views (ops/views.py). graph/ +120: the HTML view of graphs (graph/html.py; its script
# and template are not Python). profiler/ (new, outside the core): dg.profiler,
# torch.profiler's API over dispatch's and the Executable's hooks, its tables and Chrome
# traces. cli/ (new): the dualgraph command, one module per subcommand (demo, bench, show,
# export, profile). distributed/ (new): the MPI runtime with deadline-polled waits
# (mpi.py), torch.distributed's collectives, data parallelism's buckets and communication
# hooks (compression, PowerSGD). nn/ +100 and utils/ +40: DistributedDataParallel
# (nn/parallel.py), DistributedSampler. The core +200: writes through views (ops/views.py),
# create_graph through compiled calls (capture/autodiff.py), the profiler hooks. amp/
# (new, 320): autocast and GradScaler; "." +30: dg.cpu and the amp names of dg.cuda; ops/
# +150 and capture/ +80: the autocast fact and casts, the views and replay above.
# autograd/ +230: activation checkpointing (autograd/checkpoint.py: the region's node, its
# recomputation eager and traced, torch's reentrant variant and checkpoint_sequential).
# passes/ +120: rematerialisation (passes/remat.py: dg.compile's memory_budget). capture/
# +30: memory_budget and the recomputation's locations. The core +460 for these and the
# fused allreduces (passes/communication.py). export/ +1400: the ONNX import of the op
# types of onnx's conformance suite that dualgraph has no single op for (attention,
# recurrent layers, resize, grid sampling, losses, quantisation, norms, DFT, sequences,
# the training ops, ...), each a converter into registry ops, and the import's
# specialisation on shape inputs; "." +30 for the integer, float8 and 4-bit dtypes
# (dtypes.py) it reads, and the core with them. kernels/ +140: depthwise convolution's
# direct loops (kernels/conv.py) and the float32 erf and exact-GELU loops with their
# float64 polynomials (fastmath.erf32). export/ +350: inference folding for the ONNX
# export (export/onnx_fold.py: BatchNorm into conv, constant subgraphs), only what the
# outputs need written, and dg.onnx.check's pre-flight report (export/onnx_preflight.py;
# "." +20: its entry point in onnx.py), and ops/ +100 for the ops the export needs: `full`
# (a creation over symbolic dims) and `rnn_sequence` (a recurrent layer as one op); ops/ +80: conv_method's choice among 1x1 GEMMs,
# depthwise loops and blocked im2col, and the pow-by-products form. passes/ +120: the
# per-channel affine-chain folding moved from export/onnx_fold.py to passes/affine.py, shared
# with the lowering rule fold_batchnorm (BatchNorm folded in any graph with constant weights);
# the core +120 with it. export/ keeps its budget after giving that away: the last conformance
# cases of the common op types (opset 8 Scan, MaxPool's column-major indices, ...), and
# dg.onnx.check's runtime= (the caller's runtime, or dualgraph's import). export/ +150:
# sequence and optional inputs (export/onnx_structured.py: a model imported per call
# structure), the Optional ops and SequenceMap; +150: Col2Im, Det (pivoted elimination),
# RoiAlign, DeformConv and ai.onnx.ml's Binarizer and ArrayFeatureExtractor. passes/ +180 and
# ops/ +50: compiled data parallelism's communication schedule (passes/communication.py:
# overlap_communication, the compress_all_reduces rule; the all_reduce start / progress /
# wait and compressed_all_reduce ops); the core +230 with them.
# capture/ +340 and the core +410 with it: a compiled function split at its graph breaks (capture/split.py: the
# pieces, their cache and what each keeps, the last piece over the values they computed,
# the learning rates made inputs, the timing against eager).
# passes/ +200:
# the conv_epilogue lowering rule (passes/epilogue.py: conv + bias + activation + residual,
# torch's and ONNX's spellings), max_pool_values, and simplify's clamp and global-pooling
# rows; ops/ +80: their ops conv2d_epilogue and max_pool2d_values (ops/epilogue.py);
# capture/ +70 with freezing for inference (capture/freeze.py); the core +500
# with them.
# export/ +200, ops/
# +40: shapes, axes and counts computed as an imported model runs (export/onnx_runtime.py,
# ops/dynamic.py's by_value and dims_tensor) in place of a re-import per value, and the
# data-sized NonZero, Unique and NonMaxSuppression that run so; the core +60 with them.
# capture/ +380 (+70 where the split and the number inputs meet), codegen/ +20
# and the core +370: Python numbers that change made graph inputs (capture/symbolic.py:
# the symbolic number, its slots' feeding and writes, the fallback to a guard) and
# dg.compile's callable backend (codegen/executable.py's Backend). ops/ +50 and the core
# with it: Tensor.view(dtype) (the bitcast op), the bit shifts, in-place activations that
# differentiate from a copy of their input. capture/ +20 and the core +80: number
# arguments as graph inputs, cycled momentum and betas, Python random drawn in a trace.
# kernels/ +280 (+60 with the conv epilogue loop beside them)
# (issue 26, convolution kernels): depthwise rows with a nine-tap pass and strides through
# positions, the blocked (NCHW16c) loops for small planes (forward, both gradients) with
# their transposes, the general max-pool loop and where's select loops; ops/ +20 and codegen/ with them (where's select,
# the max-pool entry, the fused kernels' per-channel "cycle" inputs); the core +300.
# passes/ +110,
# ops/ +50, kernels/ +30 (issue 26, transformers): the lowering rule fuse_attention
# (passes/attention.py), its compiler-only op (ops/attention.py) and its head-block loop
# (kernels/attention.py), the select loop of an eager where; the core +250 with them.
# export/ +20: a Loop whose trip count is computed at run time is a while_loop reading it
# (one import for every count) rather than a re-import per value.
# kernels/ +150 and the core +150 (issue 26, CNN inference): kernels/conv_tiles.py,
# the convolutions by GEMMs with the epilogue applied per tile (shifted GEMMs for stride-1
# convs, im2col written from the unpadded input a tile at a time).
# passes/ +20, ops/ +20, kernels/ +40 (issue 26, transformers): the linear_epilogue rule
# (passes/epilogue.py), its op and its rows loop, fastmath's float32 FMA, and the float32
# loop of a power by products.
# ops/ +40: ops/epilogue.py holds both the per-tile conv path and the shared row pass of
# the conv and linear epilogues (two branches merged); each merged branch had used the
# same base's slack.
# capture/ +200 and the core +200 (issue 24): a split function's calls replay the previous
# call's tape (capture/replay.py) instead of building and keying a new graph each call;
# +20: a compiled call's in-place update of a tensor argument written into that argument.
# kernels/ +140, ops/ +120 (issue 26, convolution training): a "same" conv's im2col as runs
# of the input planes and col2im into the unpadded input gradient (kernels/conv_columns.py);
# training-mode BatchNorm as one op with its backward (ops/batch_norm.py), two passes each
# way (kernels/batch_norm.py); the core +260 with them.
# distributed/ +120, ops/ +30 and the core +30 (issue 28, process groups): new_group on MPI
# sub-communicators (distributed/groups.py), a ``group`` attr on every collective op.
# autograd/ +190 and the core with it (issue 24): custom autograd functions
# (autograd/function.py: dg.autograd.Function, its ctx, once_differentiable). nn/ +110
# (issue 24): packed sequences (nn/utils/rnn.py) and the recurrent layers over them.
# ops/ +210 and the core with it, nn/ +30 (issue 24): 3-D convolution and pooling, unfold
# and fold as compositions of the 2-D ops (ops/windows.py), affine_grid and grid_sample
# (ops/sampling.py), and their layers. ops/ +250, "." +50 and the core +310 (issue 24):
# torch.linalg's decompositions and solvers (ops/decompositions.py: inv, solve, slogdet,
# cholesky, qr, eigh, svd, matrix_exp with torch's VJPs; dualgraph/linalg.py: lstsq,
# pinv, the matrix norms and the _ex forms). ops/ +10: OpDef.saved_outputs on the ops
# whose gradients read their indices only. nn/ +10: process groups and packed sequences
# merged (each had counted on the same room).
# kernels/ +30 (issue 26, depthwise and grouped convs): one direct loop over zero-padded
# phase planes for depthwise (any multiplier) and narrow grouped forwards with the epilogue
# (kernels/conv_direct.py), replacing the depthwise forward's row and 3x3 loops.
# passes/ +250, ops/ +60, kernels/ +20 (issue 26, transformers): passes/linears.py's rules
# constant_linears (ONNX's MatMul + Add as a linear), join_linears (q/k/v projections of one
# input as one GEMM) and linear_norm (a post-norm LayerNorm in the linear's row pass), and
# passes/norms.py's fuse_rms_norm (RMSNorm as written -> one op, a row epilogue); the ops
# linear_norm and rms_norm and their row loops; the core +220 with them.
# passes/ +30 and the core +30 (issue 26): simplify's where with a constant condition (the
# chosen branch; zero_() in a compiled step), and x+0 with a fill of zeros.
# . +20, autograd/ +10 and the core +30 (issue 26, eager per-op cost): _helpers.getenv (the
# kernels' switches without os.environ's failing lookup), the engine's inlined first
# gradient of a node.
# capture/ +130 and the core +130 (issue 24): the trace that made a tensor, checked where
# a replayed call reads it (StaleTensorError); a step keeping a tensor at every call or
# drawing Python random numbers runs its Python at every call, compiled, not eagerly
# (capture/pyrandom.py: the generators a trace may draw from, objects included); a graph
# that stores the detached tensor a step replaces at every call (Compiled._stores).
# capture/ +10, ops/ +10 and the core +20: the merge of replay's stamps with custom
# functions and eager's per-op cuts (each branch had counted on the same room).
# passes/ +40 (issue 26, transformers): the weights_kn rule (passes/linears.py: a frozen
# linear weight stored (K, N), an NN product). kernels/ +20: the attention kernel's plan
# per kind of call (kernels/attention.py: layouts worked out once, not at every call).
# capture/ +60, ops/ +30 and the core +90 (generated programs against eager): a tensor
# argument's gradient at every call, an argument returned as it is, symbolic dims given up
# for static shapes (capture/compile.py); the layout of a traced view for contiguous() and
# a copying reshape (ops/views.py).
# kernels/ +10 (issue 28, data-parallel throughput): tuning.join_mpi, an MPI rank's share of
# the cores for OpenBLAS too and the malloc trick on. nn/ +20: DDP's broadcast of a
# module's parameters and buffers packed as bytes, in messages of at most 32 MB.
# kernels/ +20 (issue 26, dense convs): conv_tiles.columns copying a tap's run of rows of
# one image at once (one contiguous copy where input and output rows have one width);
# +10: epilogue._add_activate, a conv's bias and ReLU or clamp in one pass.
# The core +30: kernels/ grew in the merges of i-dst (join_mpi) and i-pw (im2col runs of
# rows, the one-pass bias + ReLU epilogue), which each raised kernels/ alone.
# kernels/ +35 and the core +35 (issue 26, depthwise convs): conv_direct's phase-plane
# geometry and tap offsets computed once per shape (a batch-1 call's Python cost), and a
# stride-2 row filled into both column phases in one pass (_fill_pair).
# ops/ +20 and the core +20 (issue 26, eager per-op cost, second round): reshape's static
# fast path, the float32 sine's loop entry kept, cached slice keys, x[i]'s shortcut. ops/
# +100 and the core +40 with it: the fused GRU step and its backward (ops/recurrent.py, as
# the LSTM's, whose double backward they now share), one node each way instead of ~17.
# The core +55: the merge of i-eag2 (its +60 counted from a93fa78) with the generated
# programs' fixes and the other branches' kernels.
# kernels/ +120, ops/ +10 and the core +130 (issue 26, convolution training): a stride-1
# conv and its weight gradient as GEMMs on row-shifted columns in one compiled loop over
# the batch that calls OpenBLAS's sgemm by address (kernels/conv_batch.py;
# batched.sgemm_add).
# capture/ +20 and the core +20: an argument's gradient replaced unread by the step_ and a
# guard failing again after its own trace running eagerly (not retracing without end).
# kernels/ +345, ops/ +10 and the core +355 (issue 26, eight-lane vectors): kernels/simd.py,
# Numba intrinsics for <8 x float> values (load, store, fma, max, 8x8 transpose);
# kernels/conv_lanes.py, depthwise convs with eight channels in a vector's lanes; and
# pooling.max_pool_values, inference max pooling eight windows a vector (ops/conv.py).
# Merging the groups-with-communicators branch with it: ops/ +10 (both touched ops/).
# kernels/ +35, ops/ +40 and the core +75 (issue 26, CNN inference's per-node cost): a 1x1
# conv with its epilogue and a mean over trailing dims fitted to their static shapes at
# codegen (kernels.epilogue.pointwise, row_means; the ops' ``specialise``).
# ops/ +65, passes/ +35 and the core +120 (issue 26): the conv_cat rule (passes/concat.py)
# and its op conv2d_cat (fitted to its shapes), each conv writing its own channels of the cat.
# ops/ +15 and the core +15: conv2d_epilogue's tiled and direct convs fitted too.
# The core +10 merging the eight-lane and the CNN-inference branches (both in ops/, kernels/).
# kernels/ +15 and the core +30 (issue 26, strided convolution training): conv_batch's
# row-shifted GEMMs on the columns of each row phase (stride 2: forward, weight gradient);
# the blocked GEMMs kept for many weights per output position and shallow weight gradients;
# ops/ +10: the compiled epilogue's choice of them over the im2col tiles.
# The core +10, ops/ +10, kernels/ +15 merging the conv-training branch (after i-cnn).
# nn/ +50, ops/ +10 and the core +10 (real programs, issue 26): nn.utils.weight_norm
# (nn/utils/weight_norm.py), dropout2d of other ranks, size= of the creation functions, a
# repeat that copies.
# ops/ +90 and the core +90: smooth_l1_loss and its backward as one op each (kernel, shape
# rule, VJP, ONNX export, decompositions), ten recorded ops before.
# ops/ +25, passes/ +12 and the core +40: select (x[i], unbind) as one view op, which the
# batching pass reads as a step of a tensor and simplify as a slice under a reshape; stack's
# one cat when nothing is recorded.
# ops/ +45 and the core +45: nll_loss and its backward as one op each.
# ops/ +20, passes/ +8 and the core +25: stack as one op (simplify gives the passes its cat).
# passes/ +15 merging the eager-composites branch (its simplify rows) after the conv_cat rule.
# kernels/ +45 and the core +50: the fitted mean sums in NumPy's pairwise order (eager's bits).
# kernels/ +5: threads.fitted_rows, the one caller of a fitted node's row loop (ops/ -7).
# distributed/ +260, nn/ +20 (issue 28): allreduce through an MPI shared-memory window
# (distributed/shm.py: counters, the ring for copied-in messages, DDP's buckets in a window).
# capture/ +100 and the core +100 (issue 26, rebound state): capture/held.py, tensors held
# outside modules guarded by identity where the graph reads them, and places a step fills
# anew at every call (makemore's running statistics, ``self.out``) read from the place.
# capture/ +120 and the core +120 (issue 26, automatic dynamic dims): capture/autodims.py, a
# dim whose size alone changed traced symbolic (static graphs kept where an op can't), and
# a backward graph needing a size none of its inputs has sent back to static shapes.
# capture/ +30 and the core +30: which arguments share storage with one another or with
# state (views, a parameter passed in) guarded where the graph writes (Entry._sharing).
# kernels/ +10 and the core +10 (issue 26, CNN inference kernels): simd.tree_sum, the
# fitted mean's eight running sums in one vector's lanes. kernels/ +40 and the core +40:
# inference max pooling by plain maxima, pooled again NaN-keeping only where the taps' sum
# says a NaN was there (pooling._plane_max), the edge windows in loops of their own.
# kernels/ +130 and the core +130: kernels/conv_shallow.py, convs of few input channels
# with eight output channels in a vector's lanes, and simd.broadcast_at; ops/ +5 with them.
# optim/ +80: an eager step's small parameters updated as one flat tensor (optim/flat.py);
# ops/ +15, nn/ +15 and the core +15: its flat_of/commit_flat (ops/inplace.py), also
# clip_grad_norm_'s one multiply for the small gradients. ops/ +5 and the core +10:
# permute's and transpose's checks cached per dims, reshape's NumPy path (ops/shape.py).
# kernels/ +310, ops/ +15, passes/ +0 and the core +330 (issue 26, small convolutions' training):
# kernels/conv_outlanes.py, a dense conv's forward (with its epilogue) and weight gradient
# with eight output channels in a vector's lanes, no im2col; simd.broadcast_at.
# ops/ +15 and the core +15 merging the CNN-inference and conv-training branches: one
# _conv_module chooses among conv_outlanes, conv_shallow, the row-shifted GEMMs and the tiles.
# ops/ +20, codegen/ +35 and the core +65: matmul, comparisons and a small where called as
# NumPy's own functions in compiled code (their ``specialise``); NumPy-run groups called
# directly; a compiled group's call planned once per input shapes (codegen.kernels.Plan).
# ops/ +5 merging the executable branch (its direct NumPy calls next to the merged ops).
# capture/ +50 and the core +50 (real programs, issue 26): the modules, optimisers and
# tensors a function names as globals or closure variables guarded by identity
# (scope.held_objects, Compiled._rebound): a DQN's rebuilt target network ran old graphs.
# "." +15, ops/ +5 and the core +15: OpDef.read_by, an input saved only for gradients no
# one needs is not version-checked (h[:, :2] = h[:, :2] * 0.5 before backward, as torch).
# "." +15, capture/ +35 and the core +55: dataclasses and dict subclasses flattened and
# rebuilt as their own class (_pytree.py: a module returning a record); tensors returned
# inside another object a graph break; the walk for kept state into hooks' closures and
# globals (escape._user_scope), and the forward's kept state put back after the backward's
# trace (a checkpointed block's hooks run again there).
# capture/ +10 and the core +10: a parameter's requires_grad guarded (ModuleFacts reads
# them at each call): a layer frozen mid-training kept being updated by the compiled step.
# capture/ +5, nn/ +5 and the core +5: the forward hooks and pre-hooks of the modules
# guarded (a hook registered after the first compiled call was ignored).
# capture/ +5 merging the real-programs branch after the rebound-state one (both helpers).
# ops/ +60, nn/ +5 and the core +60 (issue 28): a data-parallel bucket as a place of the
# collectives, packed in one pass and reduced where it lies by a compiled step (pack_bucket,
# all_reduce(place=)), as the eager step does: no copy into and out of the allreduce.
# distributed/ +25 (issue 28): destroy_process_group frees the shared windows nothing views
# any more (the ranks agree, then Win.Free), where they stayed mapped until MPI finalised.
# optim/ +55 (issue 26, i-dyn): adam_update_hyper, sgd_update_hyper and their group ops,
# the fused updates with a scheduled lr (betas, momentum) as inputs, not op by op.
# capture/ +50 and the core +50 (issue 26, i-dyn): the inlined fast path for graphs with
# symbolic dims (sizes bound and checked inline) and preallocated buffers (fastpath.py).
# kernels/ +125, ops/ +60, passes/ +60 and the core +215 (issue 26, packed weights):
# kernels/conv_packed.py, dense convs on a weight laid out once (six positions by sixteen
# channels a step); the op conv2d_packed and the lowering rule conv_packed (passes/convs.py).
# kernels/ +25 and the core +30 (issue 26, i-dws): the depthwise lanes kernel packs its
# weights in the loop and sums eight outputs at a time (its margin taken by the merges).
# ops/ +25, nn/ +20 and capture/ +30 (real programs, third round): a float64 batch through a
# float32 Linear/Conv raises torch's dtype error (it computed in float64); bicubic
# interpolate's weights; modules held in small containers (heads[0], nets["target"],
# cfg.model) and behind ``@no_grad()``-style decorators guarded by identity and module facts;
# the core +55 for the same.
# kernels/ +115, ops/ +85, passes/ +160, the core +360 (issue 26, i-lay): channels-last regions, the
# opt-in lowering rule channels_last (passes/layout.py), the ops relayout and
# depthwise_nhwc (ops/layout.py) and the depthwise loop on channels-last planes
# (kernels/conv_nhwc.py).
# ops/ +15, autograd/ +5 (eager per-op cost, issue 26): matmul's VJP with a matrix right
# operand as linear_backward (one op, one GEMM for the weight); the engine's heap as locals.
# capture/ +30, ops/ +10 and the core +35 (generated stateful programs): a backward inside
# through an argument with history, and an in-place write giving an argument history, are
# refused by name (they were silently wrong); a written argument returned is itself; a slot
# that comes to hold a tensor is compared by type. capture/ +45 and the core +45: a trace
# that prints runs its Python at every call (capture/prints.py: it printed once); which
# state an argument is, guarded; a refreshed view argument's gradient counted once.
# distributed/ +25, nn/ +25 (issue 28, i-ddp3): a reduction through shared memory sums this
# rank's share straight into a result of its own (a DDP bucket's .grads, a compiled step's
# new array) and copies the other shares in: no copy of the whole bucket out.
# kernels/ +15 and the core +15 (issue 26, two threads): the relay keeps the last finish
# (a worker preempted midway is a stall), matvec's stall timed, the helper re-decided
# after dg.set_num_threads.
# autograd/ +30, ops/ +25 and the core +70 (issue 26, real programs' fourth round): grad()
# runs only the nodes that lead to its inputs and takes torch's keywords, dict inputs and
# any iterable; torch.quantile (a composite of sort).
# ops/ +15 and the core +15 (generated torch-API programs): cumprod's gradient through
# zeros (it was NaN), std's at zero spread, and new results laid out row-major
# (_util.row_major: einsum's and advanced indexing's, which a later ``.view`` relies on).
# kernels/ +50, ops/ +40 and the core +100 (eager per-op cost, sixth round): nll_loss and the
# GRU step forward and backward as row loops; softmax and log-softmax loops at every float32
# size; small where() without promotion; x[int tensor] as the index op unparsed.
# kernels/ +60, ops/ +15 and the core +60 (issue 26, 1x1 convolutions): kernels/conv_pointwise.py,
# strided 1x1 convs and large 1x1 outputs as sgemm calls by blocks of output rows with the
# epilogue on each block in cache (epilogue.plane_tail shared with the planes' loop); a
# 1x1 conv of one pixel as one GEMM over the batch with its epilogue along the rows.
# kernels/ +15 and the core +15 (issue 26, attention): the mask read in its own broadcast
# layout, scale and mask in one pass.
# kernels/ +70 and the core +70 (issue 26, i-dw): depthwise rows with a 3- or 5-wide
# window's weights in registers across eight output positions, each row's sums flushed to
# the planes while in cache (depthwise and few-weight convs), the few-weight convs' rows
# shared among threads.
# kernels/ +120, ops/ +50, passes/ +25 and the core +185 (issue 26, i-wino): 3x3 stride-1
# convs by Winograd's F(2x2, 3x3) (kernels/conv_winograd.py: the transforms as loops, the 16
# products as GEMMs), the op conv2d_winograd and the lowering rule conv_winograd with its
# cost rule; conv_packed's rewrite and op kernel shared with it (passes/convs.py, ops/epilogue.py).
# ops/ +75 and the core +75 (eager per-op cost, seventh round): keys of ints and slices
# without the general parse, the mean kernel without np.mean's wrapper, var as one op.
# kernels/ +90 and the core +90 (issue 26, two threads that pay): products split by columns
# into single-threaded sgemm calls on OpenBLAS's worker (split_gemm.py), OpenBLAS's own
# threads held back meanwhile by one thread at a time (tuning.blas_alone).
# ops/ +200, the package root +10 and the core +210 (issue 26, missing names real programs
# use): logaddexp(2), logcumsumexp and cummax/cummin's positions as primitives; diag_embed,
# index_fill/index_copy, masked_scatter, kthvalue, nansum/nanmean, scatter_reduce as
# composites; torch's memory-format constants. capture/ +20 and the core +20: a generator
# drawn from by a forward's helper (only the code's globals name it) is seen (it was baked).
# kernels/ +100, ops/ +30 and the core +130 (issue 26, i-nhwc): the depthwise loop on
# channels-last rows in place at every plane size (kernels/conv_nhwc.py, with the 1x1 GEMM
# by blocks of positions there, simd.prefetch), the op pointwise_nhwc (ops/layout.py).
# nn/ +290, the package root +5 and the core +5 (real programs, sixth round):
# nn.utils.parametrize and parametrizations (weight_norm, spectral_norm) and the hook-based
# nn.utils.spectral_norm, torch's names real code uses; retain_grad() on a traced tensor a
# graph break (its hook kept the backward trace's value).
# the package root +90 (shapes: symbolic dims that are sums), capture/ +115, codegen/ +10,
# ops/ +30 (+20 with the merges) and the core +245 (capture, i-cap): cat and constant
# slices along symbolic dims, the facts a graph assumed of them checked per call; globals
# and closure variables a step rebinds are state the graph stores there.
# "." +30, autograd/ +10 and the core +40 (issue 26, eager autograd without reference
# cycles): a node's stand-ins for its outputs (dispatch._shells), the history they get for
# a recording backward (engine._give_history), a leaf's weakly held AccumulateGrad (and
# Tensor.__getstate__, which copies and pickles a leaf without it).
# ops/ +30, the package root +10 and the core +50 (issue i-gen2, silent differences the
# generated torch programs found): a symbolic dim's comparison with a number in the user's
# code ends the trace (shapes.py), an in-place result torch would not cast raises, a traced
# view eager refuses is refused (views.layout_of) and so is a traced write into a
# broadcast; hypot as a primitive and aminmax, names the programs met missing.
# ops/ +20 and the core +20 (issue 26, i-eag9, eager per-op cuts): einsum's contraction
# plan made once per equation and shapes and run step by step (ops/linalg.py).
# kernels/ +40, ops/ +10 and the core +50 (issue 26, i-tfm3, transformers on Zen 4): a
# linear's bias (and residual) written where its product goes and the product added by one
# sgemm with beta 1 (kernels/prefilled.py), one pass over the result instead of two or three
# (removed by the lead at the merge: compiled steps then rounded apart from eager ones).
# passes/ +80 and the core +45 (issue 26, i-w4): the step_weights_kn rule
# (passes/step_weights.py: a weight that a recurrent layer's steps read as small NT
# products copied transposed once per call, so each step's product is NN); batch_linears
# stacks an nn.LSTM's gate gradients in the order its input projection's gradient does;
# the core +5 more: the LSTM cell's loop adding its gates' three parts, zeros_view's bytes.
# ops/ +30, codegen/ +5 and the core +35 (issue i-buf, a step's MB-sized results in
# planned buffers): OpDef.fills_out and the out= forms of the products, convolutions,
# row ops and their backwards, which codegen/buffers.py may then give planned buffers.
# "." +25, kernels/ +15, ops/ +5 and the core +95 (the lead: eager ops recycle the big
# arrays of dead results, kernels/recycle.py and dispatch's hook; the merges' sum)
# ops/ +30 (issue 26, i-eag10, eager real programs): reduce.norms, the per-tensor norms
# of clip_grad_norm_ without a dispatch each (torch's _foreach_norm), commit_flat's write
# of an update without history, and x[:, t] as one select.
# capture/ +40 and the core +40 (i-gen4, the generated-program campaigns): an entry put
# aside per way the arguments share storage with a place the step rebinds (a trace per
# call before), requires_grad set on parameters or state while tracing (a silent
# difference) noted and put back.
# nn/ +510 (the lead: the torch.nn names real programs call that were missing):
# EmbeddingBag, LocalResponseNorm, ChannelShuffle, LPPool, MaxUnpool, RReLU, alpha and 3-d
# dropout, shrink activations, 3-d and circular padding, InstanceNorm3d, eight losses and
# the in-place functional activations (nn/functional_layers.py, nn/functional_losses.py).
# ops/ +20 and the core +20 (issue 26, i-scan): scan and while_loop fill out= (their
# stacked ys written row by row into planned buffers, carries owned), and so does
# slice_backward (an eager loop over x[:, t] recycles its gradients' arrays).
# ops/ +20 and the core +20 (issue 26, i-eagA, eager small ops): linear's second derivatives
# in closed form (linear_backward's VJP: a nested grad of the composite at every node
# before); reshape's target and permute's permutation cached per shape and arguments.
# ops/ +535, "." +60 and the core +560 (i-names): the torch functions and Tensor methods
# real programs call that were missing: ops/arrange.py (hstack & co, atleast_Nd,
# tensor_split, rot90, take, diff, cross, kron, trace as composites), ops/special.py (lgamma,
# polygamma/digamma and erfinv with their own float64 kernels, xlogy, signbit, gcd, lcm,
# isin, histc; logit and heaviside as composites), tan, ops/signal.py (window functions),
# logspace and tril/triu_indices, ops/tensor_methods.py (t_ & co in place, fill_diagonal_,
# sum_to_size, storage queries); "." the dtype queries, the generator's state as bytes and
# torch's functional forms of methods (torch.exp_, one table).
# kernels/ +85, ops/ +35, passes/ +40 and the core +160 (issue 26, i-tfm4): a frozen
# linear's weight packed once and read by a GEMM loop of our own (kernels/linear_packed.py,
# the op linear_packed and its lowering rule): onnxruntime's lead at batch 1 was its
# products on packed weights.
# ops/ +65, kernels/ +10 and the core +75 (issue 26, i-eagB, eager big ops): sigmoid, silu
# and leaky_relu as one float32 pass each way with their fused backward ops (the
# activations' composites were 3-8 passes each), global average pooling as a mean.
# kernels/ +155, passes/ +5 and the core +160 (issue 26, i-mcnn): conv_pointpacked, 1x1
# convs as a GEMM micro-kernel on the packed weight (the register block is 24 named sums:
# Numba has no vector arrays in registers), taken by conv_packed's rule.
# passes/ +25 (i-gen5, the generated-program campaigns): dce keeps a dead node that can raise
# on its indices' values (OpDef.checks_values: index, index_put, the class losses) unless
# it proves them in range, so compiled raises where eager does (a silent difference).
# capture/ +10: requires_grad set on an argument while tracing is a FlagWrite too (a silent
# difference), and the first FlagWrite runs that call's Python only (a layer frozen once).
# ops/ +15: var's corrected two-pass sum (equal values: exactly 0, as torch), and ONNX
# Elu's float32 alpha kept out of float64 models.
# capture/ +10 more: an aborted trace drops the optimiser state it made (a momentum buffer
# left as zeros was dampened at the eager run's first step: a silent difference).
# kernels/ +50, ops/ +20, the core +95 (the lead, merging this session's eight branches):
# each branch raised its budget from base's by what it needed beyond base's slack, and the
# slack was spent once per branch: the merged code is the sum of their growths.
# ops/ +160, the core +160: an LSTM layer's direction as one op each way
# (ops/recurrent_layer.py), which nn.LSTM runs in place of a cell op per step.
# ops/ +30, the core +30 (i-gen6): ``diagonal`` a view op (kernel, shape, VJP, ONNX), as
# torch's: writes through it were lost silently; var's ONNX export in the kernel's formula.
# kernels/ +75, the core +75 (i-isa): kernels/isa.py (the CPU Numba compiles for, its vector
# registers) and conv_pointpacked's 12-sum block for 16-register (AVX2) targets.
# kernels/ +10 and the core +10 (issue 26, i-pool): pooling.max_pool_values, inference max
# pooling down the window's rows then across a -inf padded row (1.4-2x the eight-lane
# windows' loop), beside max_pool's windows with positions for the backward.
# ops/ +155, kernels/ +50 and the core +205 (issue 26, i-eagR, eager ops at the programs'
# sizes): max/min along a non-last dim in one loop with a one-op gradient (along_backward),
# elu's and softplus's gradients as one op each, gather and scatter_add as primitives with
# loops along the dim (each with its own VJP for double backward, ONNX export), sums of a
# few elements per result as slice adds.
# passes/ +90, ops/ +45, kernels/ +30 and the core +165 (issue 26, i-mv3): the lowering
# rule squeeze_excite (passes/excite.py), its op (ops/excite.py) and its loop per image
# (kernels/excite.py); simplify's positive scale moved before a clamp and the conv
# epilogue's hard-sigmoid read as any affine map, clamp and scale (one graph for a
# module and its ONNX import).
# kernels/ +245, ops/ +155, passes/ +45 and the core +445 (issue 26, i-dw2): the channel-
# blocked layout (N, C/8, H, W, 8) for depthwise + 1x1 chains, on by default: its loops
# (kernels/conv_blocked.py: the depthwise rows on copied planes, a 24x8 1x1 micro-kernel
# with output channels in the lanes, 8x8 relayouts, the SE gate product), mean over middle
# dims (normalization.middle_means), four compiler-only ops with decompositions
# (ops/layout.py), mul's specialise, and passes/layout.py parameterised by the layout.
# Merged 2026-12-04 05:05 (i-lstm, i-gen6, i-isa, i-pool, i-eagR, i-eagW, i-mv3, i-dw2): the
# branches' raises each counted from one base, so the sums are set here: ops 9_640, kernels
# 5_580, passes 3_590, the core to match (the blocked layout, squeeze-excite, the LSTM layer,
# gather/scatter primitives, the max pool values loop, CPU-feature detection).
# ops/ +217 (issue 26, i-rnn): nn.GRU's and nn.RNN's layers as one op each way
# (ops/recurrent_gru_elman.py) on the recurrences they share with the LSTM layer.
# codegen/ +24 (i-red): fused sums in NumPy's pairwise order, through a scratch row. "." +10:
# gc.freeze at the end of the import (_gc.py). Merged 2026-12-04 13:10-13:20 (i-dw3: the
# channel-blocked layout again, with squeeze_excite_blocked; i-thr: which threads each loop
# ran on, kernels/thread_use.py, and 1x1 convs split by output-channel groups at batch 1):
# ops 10_010, kernels 5_665, passes 3_600, the core 29_685.
# ops/ +12 (lead): asinh, acosh, atanh as ops of their own (ONNX Asinh/Acosh/Atanh).
# ops/ +150, nn/ +10 (lead): the CTC loss, one op each way (ops/ctc.py), and nn.CTCLoss.
# nn/ +160 (lead): the lazy layers (nn/layers/lazy.py). "." +10, capture/ -10: outside_trace
# moved from capture/split.py to dispatch.py (a lazy layer's first call uses it); the core
# +4: a lazy layer's first call under dg.compile runs eagerly (errors.EagerFirstCall).
# "." +2: a symbolic dim's dtype (int64) for full((n,), x.size(0)).
# optim/ +90 (lead): LBFGS's strong-Wolfe line search (optim/line_search.py).
# ops/ +3: full's ONNX form with a symbolic value (Expand of a dim read with Shape).
# kernels/ +160, ops/ +45 (issue 26, i-pool): average pooling and short-row max pooling as
# separable loops (kernels/pooling.py), small planes pooled eight at a time in the lanes
# (kernels/pool_lanes.py). Merged 15:15: kernels 5_825, ops 10_220, the core 30_061.
# ops/ +60 (issue 26, i-eag2): dropout and topk as one op each way, index_add's shape once,
# x[i, j, None] as one index op. Merged 15:20: ops 10_280, the core 30_123.
# ops/ +610, "." +20 and the core +630 (issue 26, i-ops): the torch names ported programs
# met next (ops/special_series.py, compose.py, elementwise_compose.py, float_bits.py,
# selection.py, the inverse hyperbolics; dg.special), and median's NaN as torch's.
# Merged 15:30 (i-ops, whose asinh family replaced the lead's): "." 2_033, ops 10_877, the
# core 30_741.
# Merged 15:30 (i-conv: +17 in kernels/ for the 1x1 loop's tail positions): kernels 5_842,
# the core 30_758.
# ops/ +80 (i-dist): the seeded gamma, Poisson and binomial draws (dg.poisson, dg.binomial)
# and igamma (Gamma's CDF); distributions +1_211: torch.distributions' common families,
# transforms, constraints and kl pairs, one module per kind. Merged 15:35: ops 10_957, the
# core 30_838.
# ops/ +44, kernels/ +32 (i-cor): fused LayerNorm/RMSNorm summing in NumPy's order (a stack
# array intrinsic), a traced t_()'s layout, writes into non-overlapping parts of an expand,
# half precision times a Python number as torch. Merged 15:40: kernels 5_873, ops 11_001,
# the core 30_909.
# +1 (lead, after the merges): half-precision dropout masks divided in float32, as torch.
# "." +1 (review): dtypes imports shapes.Sym for a symbolic dim's dtype.
# func/ (new, outside the core, 360): torch.func's transforms (functional_call,
# stack_module_state, vmap, grad, vjp, jvp, jacrev, jacfwd, hessian); autograd/ +165:
# torch.autograd.functional (jacobian, hessian, vjp, jvp, vhp, hvp) and autograd.grad's
# is_grads_batched; "." +30: torch's _foreach_* functions; optim/ +145: swa_utils
# (AveragedModel, SWALR, update_bn, the EMA and SWA averaging functions). The core 31_101.
# nn/ +20: a module's registries count direct writes (nn/module.py's _Registry), and
# nn.utils.stateless; "." +4, ops/ +4: slices by a symbolic size a constant away from the
# dim's (x[:n] of n + 1). The core 31_116.
# ops/ +30: NumPy's axis/keepdims names for dim/keepdim (ops/numpy_names.py). The core 31_153.
# kernels/ +75, ops/ +26 (issue 26, i-w4): sixteen-lane (zmm) vectors in simd.py and the
# packed product's register block on them, its last rows two by two, pack_kn; an LSTM
# layer's steps in one compiled loop each way (kernels/recurrence.py), the cell loops
# otherwise called through their kept entries.
# ops +60 (issue 26): scatter_reduce's sum/mean/amax/amin one op (kernel, VJP, ONNX form);
# ops +31, passes +3: hardtanh a primitive with a one-op backward, and its simplify rule;
# ops +48, passes +8: hardsigmoid and hardswish as primitives with one-op backwards, too.
# kernels/ +20, ops/ +10 and the core +30 (issue 26, i-regnet): conv outputs written into a
# concatenation's block of channels at any batch (kernels.out_images, an image stride in
# the packed, 1x1 and Winograd loops; the other conv kernels through a fresh array).
# kernels/ +122 and the core with it (i-regnet): the packed conv loop's sixteen-lane pair
# on AVX-512 (conv_packed._wide_pair_sums) and simd.py's sixteen-lane intrinsics.
# i-stem wrote the same sixteen-lane packed loop as i-regnet: i-regnet's kept, i-stem's
# padding copy by rows (conv_outlanes.pad_image) and its tests merged. Merged 18:50:
# kernels 6_069, the core 31_534.
# kernels/ +57, ops/ +38, passes/ +35 and the core +124 (issue 26, i-mnv3): the rule
# gate_into_weights (passes/excite.py), its op gated_pointwise_blocked (ops/layout.py), the
# gated weights' loop (kernels/excite.py) and the blocked SE's vector sums.
# ops/ +64 (i-fuzz): torch's rules the typed-program campaign found broken: Python ints
# wrapped into narrow integer dtypes, integer pow at negative exponents, promotion before
# add's alpha and addcdiv, zero gradients of trunc division and copysign's sign, 0-d dims,
# clamp's two tensor bounds, float64 to half precision through float32, empty products.
# ops/ +30, "." -20 (lead, after the merges): the _foreach_* functions moved to ops/foreach.py
# (a table of method names belongs with the ops); dtypes.cast (was ops/_util's: creation
# imports it without a cycle).
# kernels/ +21 and the core to its count (issue 26, lead): the packed linear loop takes K in
# blocks of DEPTH steps (a panel's block of weights stays in L1 while the rows pass).
# autograd/ +16, optim/ +12, core +23 (i-eagw): a leaf's .grad takes an unshared gradient
# without a copy (engine._unshared, torch's steal by use count); eager optimiser updates
# write the parameters and their state in place (optim/_ops._update_); isa.target cached.
# kernels/ +88 and the core with it (issue 26, i-wino16): the Winograd transforms on vectors
# of sixteen lanes on AVX-512 (eight on AVX2), their input rows padded and epilogue run once
# an image, simd.py's deinterleave and zip shuffles.
# autograd/ +32, core +34 (i-split): the eager engine writes the gradients of a tensor's
# slices and selects (a split's parts) into one array (engine._add_block, OpDef.grad_block).
# "." +26, distributions +1 and the core +28 (i-real9): distributions flattened as structures
# of their tensors (_pytree.py); a traced function's state read as a Python value is a break.
# kernels/ +40 and the core +48 (issue 26, i-pw16): conv_pointpacked's register block on
# sixteen-lane vectors where AVX-512 runs at full width (isa.full_width), its helpers
# written once for both widths (simd.load_like, broadcast_at_like, lanes_of).
# kernels/ +90 and the core +90 (i-dw16, issue 26, sixteen lanes): the blocked depthwise
# loop's pairs of blocks and the 1x1 loop's groups of 48 channels, with the intrinsics
# that let one loop body run either width (simd.load_as, store_runs, lanes_of).
# ops/ +10 (issue 26, i-lstm): a trained layer's linear packed at each call where the sum
# is short (ops/linalg._product_t, linear_packed.per_call), forward and input gradient.
# capture/ +47 and the core +33 (i-real10): a scheduler stepped inside a compiled function
# (capture/pyschedule.py) and scalars in lists guarded; 0-d inputs of the unary kernels.
# kernels/ +3 and the core +2 (issue 26, i-pw16b): the 1x1 loop's epilogue a function of its
# own (conv_pointpacked._tail), so that Numba does not copy its IR into the loop.
# kernels/ +10 and the core +10 (i-compile, issue 26): Numba's inliner copies a callee's
# scope once per inline, not once per block (build._copy_scopes_once: 4/5 of the compile).
# kernels/ +91 and the core with it (issue 26, i-b1cnn): conv_packed's two pairs an item on
# the padded grid (24 sums a tap, twelve positions unrolled), Winograd's kept workspace.
# capture/ +5 (after the merges): schedulers known by duck typing (scope.is_scheduler), as
# modules and optimisers are (capture never imports optim).
# ops/ +3 and the core +6: logit's NaN outside [0, 1], in value and gradient, as torch's.
# ops/ +12 and the core +12: entr an op of its own (torch's gradient at and below 0; its
# ONNX form).
# kernels/ +9, ops/ +2 and the core +12 (issue 26, i-grouped): grouped convs of
# any width on conv_packed, each group's outputs padded to whole pairs (pack, groups_fit).
# ops/ +137, kernels/ +38, passes/ +210 and the core +386 (issue 26, i-dnbn): BatchNorm-ReLU
# before a 1x1 conv as the prologue of its input read (ops/prologue.py, passes/prologue.py,
# conv_pointpacked._prologue); a BatchNorm without activation before an unpadded conv or a
# linear folded into its weights (passes/affine.input_affine_chains); a chain of
# concatenations grown in one buffer, each conv writing its block (passes/concat's
# cat_in_place, ops/shape.py's cat_grown and slice_update_in_place, ops/epilogue.py's
# conv2d_into).
# kernels/ +47, ops/ +1 and the core with them (issue 26, i-stempool): pool_lanes' groups of
# sixteen planes, a bordered buffer (fixed windows, no edge tests) and plain maxima;
# kernels/ +43, ops/ +9, passes/ +2: conv_shallow's positions in the lanes (a 4x6 block
# of rows by channels on column-phase planes) and its routing before outlanes and packed.
# capture/ +27 and the core with it (i-real11): kept state looked for in gradient hooks'
# closures and hook methods' objects; a hook in a compiled forward keeping its gradient.
# kernels/ +37, ops/ +7 and the core +44 (issue 26, i-lstm2): column sums in registers for
# the bias gradients (kernels/sums.py column_sums, ops/_util.py column_sum); kernels/ +20 and
# the core with it: simd.wide_loops, sixteen-lane auto-vectorised activation loops.
# passes/ +70, kernels/ +4 and the core +75 (issue 26, i-convnext): patchify_conv (a conv
# whose kernel equals its stride as a linear over patches, passes/patchify.py) and the
# packed linear's full-panel precondition (linear_packed.constant_wins).
# kernels/ +88 and the core with it (issue 26, i-s2conv): conv_packed's strided convs on the
# grid of the image's phases (pad_phases), three pairs an item on runs of a row (small planes).
# ops/ +7 and the core +7: conv2d and its gradients on an empty batch (each path raised).
# capture/ +2 and the core +2: checked mode's tolerance scaled to the value's largest element.
# kernels/ +31 and the core +34 (codegen/ +3 within its own; issue 26, i-gelu):
# fastmath._gauss32 (exp(-x^2/2) from an exact x^2, 2**n from a rounded float's bits), the
# exact GELU's tail to -13.2; wide_loops in the epilogue loops and elementwise fused kernels.
# kernels/ +37, ops/ +3 and the core +40 (issue 26, i-pool2): pooling.max_pool_values
# sixteen lanes a vector at full AVX-512 width (down the columns of rows of sixteen, across
# where the output rows hold sixteen), a pair of taps from two loads at stride 2;
# max_pool2d_values fills out= (the memory plan's buffer).
# nn/ +110, autograd/ +8, ops/ +6 and the core +15 (i-real12): module backward hooks
# (nn/backward_hooks.py: register_full_backward_hook and its pre-hook, a graph break under
# compile); a custom function's non-materialised and non-differentiable outputs as torch's,
# and the in-place write into an input it returned as it is refused. passes/ +1: a live
# reader is one any of whose outputs is needed. autograd/ +17 and the core with it:
# torch.autograd.set_detect_anomaly (a call or a block), and no NaN check of a traced
# backward's symbolic values.
# kernels/ +50 and the core with it (issue 26, i-regnet2): conv_packed's one pair an item on
# runs of two rows (WIDE_ROW_PAIR: grouped and one-pair convs at stride 1); a grid of the
# output's rows written as one plane.
# kernels/ +15 and the core +15 (issue 26, i-tfm2): linear_packed prefetches the next block
# of weights into L2 while a band's rows pass over this one.
# kernels/ +25, passes/ +30 and the core +55 (issue 26, i-mobile2): depthwise_nhwc on
# sixteen-lane blocks; channels_last_views (permutes at a channels-last region's edges read
# as they are, passes/layout.py).
# kernels/ +4 and the core +4 (issue 26, i-wtrain2): linear_packed.per_call's narrow rule
# (a trained layer's product of at most two panels packed at each call past K 192).
# kernels/ +23, ops/ +33 and the core +52 (issue 26, i-dispatch): kernels fitted once to a
# compiled node's shapes (conv_packed/conv_direct/conv_lanes.fitted, conv2d's specialise,
# the squeeze-and-excitation ops' specialise).
# codegen/ +15 and the core with it: a fitted kernel bound for one call at a time (a
# concurrent call of the same compiled graph gets one fitted afresh).
# codegen/ +4 (lead): a fitted kernel fitted again after dg.set_num_threads. kernels/ +98,
# ops/ +17 and the core +119 (lead): lgamma, polygamma and erfinv as one-pass loops
# (kernels/special.py; the NumPy forms stay for hosts without Numba).
# passes/ +44, ops/ +2 and the core +46 (lead): zero padding before a conv (F.pad, an ONNX Pad)
# taken into the conv's padding (passes/simplify.py).
# passes/ +70 and the core with it (lead): LayerNorm as written (by hand, ONNX below opset 17)
# made one layer_norm (passes/norms.py, fuse_layer_norm).
# passes/ +21 and the core with it (lead): the exact GELU written out as gelu, x * relu6(x + 3) / 6
# as hard-swish (simplify's rows).
# passes/ +26 and the core with it (lead): the tanh GELU written out as gelu_tanh.
# "." +3 and the core with it (lead): a graph break's read-only value copied where a
# Parameter takes it (a module built inside a compiled function).
# kernels/ +3, ops/ +2 and the core +5 (issue 26, i-poolfuse): pool_lanes.beats_values, max
# pools of small planes with the planes in the lanes before the values loop.
# kernels/ +30 and the core +30 (issue 26, i-tfm16): attention's head blocks prefetch the
# next block's q/k/v lines (strided heads of a projection's output past L2) during softmax.
# "." +17, ops/ +98, nn/ +97 and the core +115 (round 13, i-real13): torch's out= on the
# torch/special/linalg functions (ops/out_argument.py), torch.combinations, diagonal of
# batched matrices, torch.linalg's cross/vecdot/matmul/diagonal; interpolate's antialias
# weights, nn.utils.fusion, get_total_norm/clip_grads_with_norm_, nn.init.dirac_.
# the core +11, autograd/ +6, ops/ +4 (issue 26, i-eager2): a recorded op's
# site kept as (code, offset) and its line worked out when printed; the engine's owned sums
# dropped per gradient; linear's backward, permute and numel off NumPy's Python wrappers.
# kernels/ +45 and the core +45 (issue 26, i-1x1m): conv_pointpacked asks the next pair's
# weight rows into L2, runs its tail's columns per block of input rows (their sums kept in
# the scratch), and takes strided 1x1s on the gathered input.
# kernels/ +30, ops/ +31 and the core +61 (issue 26, i-fit2): conv_shallow.fitted and the
# channel relayouts fitted once; the blocked and squeeze-and-excitation ops fill out=.
# kernels/ +118, ops/ +36, passes/ +36 and the core +190 (issue 26, i-dw3): the rule
# expand_into_depthwise (passes/expand.py), its op expand_depthwise_blocked (ops/layout.py)
# and its loop by bands of rows (kernels/conv_expand.py; conv_blocked's 1x1 group loop
# taking the output's layout).
# "." +4, ops/ +35, capture/ +13, nn/ +231 and the core +52 (round 14, i-real14):
# torch.as_strided (ops/arrange.py), a write through .data of a view reaching its base
# (ops/inplace.py), a forward's tensor hooks kept for the create_graph replay, the state of
# module arguments read as a Python value as a break (capture/scope.py), nn.utils.prune.
# export/ +36 and nn/ +19 (lead): Resize of a dynamic batch, and per input shape along a
# dynamic height or width (onnx_import's _NeedsShapes); adaptive_max_pool2d's indices.
# capture/ +161, ops/ +21, passes/ +2, "." +9 and the core +193 (issue 26, i-kvslice):
# shapes.SizeCases (a slice's clamp decided by the traced sizes, the case a graph fact) and
# a graph per case (Entry.cases); narrow and table[T] by traced sizes; autodims.PlaceDims, a
# KV cache kept in an attribute or global traced with its length symbolic; Held.unset and
# the graphs of a signature swapped by what their places hold (_by_places).
# "." +9 and capture/ +4 (lead): state read for its sizes alone bound (tensor._shaped).
# kernels/ +20 and the core +20 (issue 26, i-dense3): pad_phases splits a row into both
# column phases in one vectorised loop at a column stride of two; the pairs left over
# from the packed loop's threes summed alone on runs of two rows.
# kernels/ +17 and the core +17 (issue 26, i-effnet): the blocked depthwise and expand loops
# run their epilogue sixteen lanes wide and over several short rows at once
# (conv_lanes.rows_due); rows of seven positions one register block (run_wide's n).
# kernels/ +50 and the core +47 (issue 26, i-pool3): pooling.max_pool_values straight from
# the input rows (the common windows unrolled: max_pool_values_unrolled, since i-pool6
# pool_separable), simd.load_inside
# and store_first (masked).
# kernels/ +49, ops/ +49, passes/ +11 and the core +109 (issue 26, i-stem2): conv_shallow's
# epilogue in registers and its channel-blocked output, the op shallow_blocked and the
# blocked layout's "shallow" form (a first layer writes the blocked region's input).
# "." +370, ops/ +65, nn/ +50 and the core +435 (lead, issue 26's real programs): torch's
# top-level spellings with ATen's arguments and the Tensor methods real code calls
# (_aten_forms.py: torch.layer_norm, torch.embedding(weight, ids), the losses' enum
# reductions, *_scatter, gradient, vander, histogram, asarray, the interop-thread and
# autocast-cpu settings, ...), max_pool3d's indices,
# conv_transpose3d (ConvTranspose3d and its lazy form), F's *_with_indices and upsample_*
# spellings, pdist, nn.DataParallel and NLLLoss2d.
# optim/ +110, ops/ +16 and the core +16 (lead): Muon and Adafactor (optim/matrix.py);
# half-precision addmm / baddbmm summed in float32 and rounded once, as torch's.
# ops/ +18 and the core +18 (lead): grid_sample of volumes (5-D, trilinear).
# nn/ +62 (lead): SyncBatchNorm (nn/layers/sync_norm.py) and convert_sync_batchnorm.
# nn/ +41, ops/ +2 and the core +2 (lead): AdaptiveMaxPool3d, MaxUnpool3d, LPPool3d.
# ops/ +99 and the core with it, nn/ +83, distributions +37 (issue 26, i-real15): quantile
# by ops on a tensor of levels, cov's fweights/aweights, unique_consecutive, cat's skip of
# shape-(0,) tensors, bicubic grid_sample (+2 at the merge with volumes');
# nn.AdaptiveLogSoftmaxWithLoss (nn/layers/adaptive.py); LowRankMultivariateNormal.
# passes/ +44 and the core +44 (issue 26, i-pool4): the lowering rule pool_before_conv
# (passes/pool_first.py), an average pool moved before the 1x1 conv it reads. kernels/ +73,
# ops/ +8 and the core +81 (issue 26, i-pool4): float32 average pooling straight from the
# input rows (kernels/pool_means.py, the common windows unrolled), the op filling out=.
# kernels/ +18 and the core +18 (issue 26, i-squeeze): conv_pointpacked streams an input
# larger than L2 (the next block of rows asked into L2, fewer rows a block for few outputs).
# ops/ +2 and the core +2 (lead): running ops accumulate float32 in float64, as torch's.
# ops/ +17 and the core +17 (issue 26, i-percall): linear_epilogue's batch-1 product fitted
# once (ops/epilogue.py's _specialise_linear: matvec's plan, the row pass's kept entry).
# ops/ +4 and the core +4 (issue 26, i-eager5): a small float32/float64 sum straight to
# its NumPy call, without the general path's checks (half the kernel's cost).
# ops/ +55, capture/ +18 and the core +65 (issue 26, i-real16): frexp (ops/float_bits.py)
# and nanquantile (ops/index.py, each slice ranked by its own count; quantile's NaN
# slices NaN as torch's), searchsorted's sorter checked, arange of a traced length by
# ops (ops/creation.py); a compiled forward's backward graph writes the state its
# checkpointed regions write again when recomputed (capture/autodiff.py).
# The core +5 at the merges of i-percall, i-conv7, i-eager5 and i-real16 (creation's arange
# of a traced length applies cumsum by its registered name: no import cycle).
# ops/ +41, kernels/ +6 and the core +45 (issue 26, i-pool5): pooling fitted to a compiled
# node's shape (ops/conv.py's plans, fitted_pool and the specialise of max_pool2d_values
# and avg_pool2d: the loop's choice and entry once, not at each call), pool_lanes' common
# windows unrolled.
# kernels/ +5 and the core +8 at the merge of i-pool5 with i-conv7 (conv_pointpacked's
# rows_a_block, kept within the folder's slack alone).
# ops/ +9 and the core +9 (lead): a layout ``h.t_()`` recorded for a tensor of a symbolic
# dim is kept at stand-in sizes each name keeps (views._stand_in_shape).
# kernels/ +4 and the core +4 (issue 26, i-dw7): conv_blocked.paired, depthwise blocks in
# pairs on half-width AVX-512 while a pair's padded plane fits L1.
# ops/ +112, the package's top level +8 and the core +120 (issue 26, i-real17): the LU
# factorisation (ops/lu.py: linalg.lu_factor, lu, lu_solve, lu_factor_ex, torch.lu,
# lu_unpack, lu_solve, with torch's gradient), which normflows-style flows call.
# capture/ +55 and the core +55 (issue 26, i-real17): the default dtype guarded (a graph
# traced under float64 served float32 calls), and a compiled output that is a view of an
# input or state made again as that view, at the call's symbolic sizes too
# (compile._view_chains; a copy lost writes).
# autograd/ +19 (gradcheck +2), capture/ +12 and the core +31 (issue 26, i-real17): set_grad_enabled as a
# plain call sets grad mode at once as torch's (eagerly it was ignored), and a compiled
# function that leaves grad mode changed runs its Python at every call (ModeWrite).
# ops/ +13 and the core +12 (lead): a zero remainder keeps the dividend's sign as torch's
# (elementwise._remainder), scatter_reduce of a 0-d tensor.
# kernels/ +3 and the core +3 (issue 26, i-fire): conv_packed.rows_wide, three pairs on
# runs of a row (7x7 outputs) on half-width AVX-512.
# kernels/ +22 and the core +22 (issue 26, i-regnet5): threads.Kept, a fitted loop's call
# through its job entry with the block of words kept (ctypes converted every argument of
# the plain entry at every call: 2.5 us a fitted node's call).
# kernels/ +116 and the core +116 (issue 26, i-pool6): kernels/pool_separable.py, max pools of
# windows up to three columns reduced down each chunk of a row once and across by shuffles
# (replacing pooling.max_pool_values_unrolled), simd.next_lane and next_two_lanes.
# ops/ +2, kernels/ -2 (lead, at the merge of i-pool6): values_loop moved to
# pool_separable (pooling imported it back: an import cycle), ops/conv.py imports it.
# autograd/ +92, ops/ +22, the package's top level +4 and the core +115, nn/ +39 (issue 26,
# i-real18): torch.autograd.graph (autograd/graph.py: saved_tensors_hooks, save_on_cpu,
# disable_saved_tensors_hooks; tape.pack_saved and unpacked_inputs), triangular_solve,
# linspace by torch's float32 arithmetic (affine_grid's identity grid on the same side of
# each pixel centre), torch.inf/nan/pi/e; nn/encoder_fastpath.py (TransformerEncoder's
# padded positions zero where torch's nested tensors are).
# kernels/ +8 and the core +8 (issue 26, i-thr3): tuning.Backoff.weigh, the relay's
# back-off weighing each shared call's time saved against its wait (counting stalls backed
# a batch-1 CNN on a loaded host off for good), blas_threads.balance.
# the core +3 (lead, at the merge of both): their folders' counts summed.
# kernels/ +41, ops/ +5 and the core +46 (issue 26, i-eager6): split_gemm.by_rows (2-D
# products of linear, its gradients and matmul in row ranges, one single-threaded sgemm
# each, on OpenBLAS's worker, the bits of one thread; ops/linalg._gemm), linear_packed's
# panels and column_sums with flat arrays and the caller's scratch (native job entries).
# kernels/ +3 and the core +3 (lead, at the merge after i-thr3's): the folder's count.
# "." +4, ops/ +4, nn/ +2, capture/ +11 and the core +17 (issue 26, i-guard2): the count of
# tensor changes (tensor.MUTATIONS, tensor.bump) at each write of a tensor's array or
# version, which lets a compiled call's guards skip reading its frozen and captured
# tensors when nothing changed (161 of them: 9 us a call).
# the core +3 (lead, at the merge of i-guard2 after the others): the folders summed.
# codegen/ +7 and the core +7 (issue 26, i-inmodel): buffers.aligned_empty, the planned
# buffers on a cache line (malloc's 16 bytes past one split a 1x1's vector rows).
# capture/ +7, "." +1 and the core +8 (lead, review): dg.backends.mha's switch a mode
# traces depend on (dispatch.mha_fastpath in guards.mode_facts and the fast path's guard).
CORE_BUDGET = 36_018
BUDGETS = {".": 2_527, "amp": 320, "autograd": 1_238, "backends": 40, "capture": 5_425,
           "cli": 320, "codegen": 1_376, "distributed": 1_730, "graph": 1_120, "kernels": 7_784,
           "ops": 12_357, "passes": 4_199, "export": 3_876, "nn": 5_408, "optim": 1_867,
           "profiler": 440, "utils": 600, "distributions": 1_459, "func": 360}
CORE = (".", "autograd", "capture", "codegen", "graph", "kernels", "ops", "passes")
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}


def _docstring_spans(tree: ast.AST) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of each module, class and function docstring."""
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                spans.append(((first.lineno, first.col_offset),
                              (first.end_lineno, first.end_col_offset)))
    return spans


def code_lines(source: str) -> int:
    """The number of lines of ``source`` that hold code (see the module docstring)."""
    docstrings = _docstring_spans(ast.parse(source))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in NOT_CODE:
            continue
        if tok.type == tokenize.STRING and any(start <= tok.start and tok.end <= end
                                               for start, end in docstrings):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines)


@functools.cache
def lines_per_folder() -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        folder = parts[0] if len(parts) > 1 else "."
        counts[folder] = counts.get(folder, 0) + code_lines(path.read_text())
    return counts


def test_every_folder_has_a_budget_and_keeps_to_it():
    counts = lines_per_folder()
    table = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    assert set(counts) == set(BUDGETS), f"a folder without a budget, or the reverse: {table}"
    over = {k: (v, BUDGETS[k]) for k, v in counts.items() if v > BUDGETS[k]}
    assert not over, f"over budget (code lines, budget): {over}; all folders: {table}"


def test_the_core_keeps_to_its_budget():
    counts = lines_per_folder()
    core = sum(counts[k] for k in CORE)
    assert core <= CORE_BUDGET, f"the core has {core} code lines (budget {CORE_BUDGET})"


def test_only_code_lines_count():
    source = '''"""A module docstring
over two lines."""
import os  # a trailing comment: the line counts once


class A:
    """A class docstring."""

    def f(self):
        """A function docstring,
        over two lines."""
        # a comment line
        s = """a string that is
        not a docstring"""
        return (s,
                os.sep)
'''
    assert code_lines(source) == 1 + 1 + 1 + 2 + 2
    assert code_lines("") == 0
