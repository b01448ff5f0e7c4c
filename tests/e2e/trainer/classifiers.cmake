# End-to-end tests of the classifiers (model.type mlp, cnn, encoder_classifier;
# task/classifier_task.cpp) on small learnable data sets built at test time:
# images.h5 (make_idx_fixtures' learnable set through `trainer-data mnist`: 400
# train / 100 val images of 1x4x6, the label readable from the pixels) and
# text.h5 (make_text_fixture.sh through `trainer-data csv`: 299 train / 101 val
# documents, spam = contains "prize"). Included from CMakeLists.txt.
set(cls_images ${CMAKE_CURRENT_BINARY_DIR}/images.h5)
set(cls_text ${CMAKE_CURRENT_BINARY_DIR}/text.h5)
add_test(NAME trainer_cls_image_data COMMAND sh -c
  "set -e; $<TARGET_FILE:make_idx_fixtures> '${CMAKE_CURRENT_BINARY_DIR}/idx'; \
   $<TARGET_FILE:trainer-data> mnist '${CMAKE_CURRENT_BINARY_DIR}/idx/learnable' '${cls_images}'")
set_tests_properties(trainer_cls_image_data PROPERTIES FIXTURES_SETUP cls_images LABELS e2e
  ENVIRONMENT "${SHARDTRAIN_MPI_ENV}")
# images_bad_label.h5: images.h5 with train label 5 set to 12 (10 classes).
add_executable(set_sample_label set_sample_label.cpp)
target_link_libraries(set_sample_label PRIVATE HDF5::HDF5 MPI::MPI_C)  # parallel HDF5: mpi.h
add_test(NAME trainer_cls_bad_label_data COMMAND set_sample_label ${cls_images}
  ${CMAKE_CURRENT_BINARY_DIR}/images_bad_label.h5 train 5 12)
set_tests_properties(trainer_cls_bad_label_data PROPERTIES FIXTURES_SETUP cls_bad_label FIXTURES_REQUIRED cls_images
  LABELS e2e)
add_test(NAME trainer_cls_text_data COMMAND sh -c
  "set -e; '${CMAKE_CURRENT_SOURCE_DIR}/make_text_fixture.sh' '${CMAKE_CURRENT_BINARY_DIR}/text.csv'; \
   $<TARGET_FILE:trainer-data> csv '${CMAKE_CURRENT_BINARY_DIR}/text.csv' '${cls_text}' --seq-len 48 \
   --val-fraction 0.25; \
   $<TARGET_FILE:trainer-data> csv '${CMAKE_CURRENT_BINARY_DIR}/text.csv' '${CMAKE_CURRENT_BINARY_DIR}/words.h5' \
   --seq-len 16 --val-fraction 0.25 --tokenizer word-hash --buckets 512")
set_tests_properties(trainer_cls_text_data PROPERTIES FIXTURES_SETUP cls_text LABELS e2e
  ENVIRONMENT "${SHARDTRAIN_MPI_ENV}")

# classifier_e2e(NAME PROCESSORS MODEL SCRIPT ARGS...): SCRIPT (trainer_e2e.sh or
# checkpoint_e2e.sh) with inputs/tiny_MODEL.toml on its data set.
function(classifier_e2e name np model script)
  set(drop 0.3)
  if(model STREQUAL "encoder")
    set(data ${cls_text})
    set(fixture cls_text)
    # Two classes: the loss starts at ln 2 = 0.69. The drop is counted from the
    # first logged row: step 1 (0.697) when every step is logged, so 0.09 asks
    # for a final loss below 0.607 (measured 0.598), lower than the 0.1 from
    # step 5 (0.717) asked when every 5th step was logged.
    set(drop 0.09)
  else()
    set(data ${cls_images})
    set(fixture cls_images)
  endif()
  add_test(NAME ${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/${script} ${ARGN})
  # Its own WORK, but the reference runs (NAME_ref_npN, the FIXTURES_SETUP of
  # the equivalence tests) write to the shared one (CMakeLists.txt's env_common).
  set(w ${work}/t/${name})
  if(name MATCHES "_ref_np[0-9]+$")
    set(w ${work})
  endif()
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "${env_common};MIN_DROP=${drop};DATA=${data};INPUT=${PROJECT_SOURCE_DIR}/inputs/tiny_${model}.toml;CKPT_TOOL=$<TARGET_FILE:trainer-ckpt>;WORK=${w}"
    LABELS "e2e;mpi" PROCESSORS ${np} TIMEOUT 600 FIXTURES_REQUIRED "${fixture}")
endfunction()

# Rank and stage equivalence tolerances (loss and val_loss / grad_norm, relative,
# every step of 30), measured worst over 2, 3, 4 ranks and stages 1-3 at 3 ranks:
# mlp 1.6e-7 / 2.2e-7, cnn 1.8e-7 / 5.0e-7, encoder 6.4e-7 (val_loss) / 2.1e-6. The
# encoder's differences grow from about 1e-8 in the first 10 steps to those
# values at steps 25-30 (its gradient norm grows from 0.4 to 8 there), so it gets
# 3e-6 / 1e-5; mlp and cnn 1e-6 / 3e-6.
set(cls_equiv_tol_mlp 1e-6/3e-6)
set(cls_equiv_tol_cnn 1e-6/3e-6)
set(cls_equiv_tol_encoder 3e-6/1e-5)
foreach(model mlp cnn encoder)
  set(t trainer_${model})
  set(tol ${cls_equiv_tol_${model}})
  # It learns (the learnable sets are easy: >= 90% after 150 steps) and reports
  # accuracy, the confusion matrix and val_accuracy in metrics.csv.
  classifier_e2e(${t}_learn_np2 2 ${model} trainer_e2e.sh learn 2 ${model}_learn 0.9
    --set train.steps=150 --set train.eval_every=50)
  # Rank-count equivalence at 2, 3 (8 samples do not divide by 3) and 4 ranks,
  # every ZeRO stage at 3 ranks, within ${tol} of 1 rank (above).
  classifier_e2e(${t}_ref_np1 1 ${model} trainer_e2e.sh run 1 ${model}_ref_np1 --set train.log_every=1)
  set_tests_properties(${t}_ref_np1 PROPERTIES FIXTURES_SETUP ${t}_ref)
  foreach(np 2 3 4)
    classifier_e2e(${t}_equiv_np${np} 2 ${model} trainer_e2e.sh equiv ${model}_equiv_np${np} ${np}
      ${model}_ref_np1 ${tol})
    set_tests_properties(${t}_equiv_np${np} PROPERTIES FIXTURES_REQUIRED "${t}_ref;cls_images;cls_text")
  endforeach()
  foreach(stage 1 2 3)
    classifier_e2e(${t}_zero${stage}_np3 2 ${model} trainer_e2e.sh equiv ${model}_zero${stage}_np3 3
      ${model}_ref_np1 ${tol} --set parallel.zero_stage=${stage} --set parallel.bucket_mb=0)
    set_tests_properties(${t}_zero${stage}_np3 PROPERTIES FIXTURES_REQUIRED "${t}_ref;cls_images;cls_text")
  endforeach()
  # 16-bit storage with fp32 master weights follows the fp32 curve (the tiny
  # inputs' large learning rates amplify rounding: measured at most 3.7% (fp16)
  # and 6.3% (bf16) over the 6 rows of every 5th step) and learns as well as fp32.
  # These log every 5th step (compared with the reference's rows of those steps):
  # between them the cnn's bf16 loss differs by up to 17% (step 28), and the
  # gradient norms by up to 20% (not compared).
  classifier_e2e(${t}_fp16_s2_np2 2 ${model} trainer_e2e.sh equiv ${model}_fp16_s2_np2 2 ${model}_ref_np1 0.06/-
    --set precision.mode=fp16 --set parallel.zero_stage=2 --set precision.init_scale=1024 --set train.log_every=5)
  classifier_e2e(${t}_bf16_s3_np3 2 ${model} trainer_e2e.sh equiv ${model}_bf16_s3_np3 3 ${model}_ref_np1 0.12/-
    --set precision.mode=bf16 --set parallel.zero_stage=3 --set train.log_every=5)
  classifier_e2e(${t}_learn_bf16_np3 2 ${model} trainer_e2e.sh learn 3 ${model}_learn_bf16 0.9
    --set train.steps=150 --set train.eval_every=50 --set precision.mode=bf16 --set parallel.zero_stage=1)
  classifier_e2e(${t}_learn_fp16_np2 2 ${model} trainer_e2e.sh learn 2 ${model}_learn_fp16 0.9
    --set train.steps=150 --set train.eval_every=50 --set precision.mode=fp16 --set parallel.zero_stage=3)
  foreach(name fp16_s2_np2 bf16_s3_np3)
    set_tests_properties(${t}_${name} PROPERTIES FIXTURES_REQUIRED "${t}_ref;cls_images;cls_text")
  endforeach()
  # Same inputs and rank count: bitwise-identical losses and weights.
  classifier_e2e(${t}_determinism_np3 2 ${model} trainer_e2e.sh determinism 3 _${model})
  # Stopped at step 20 and resumed: bitwise the uninterrupted run (dropout masks included).
  classifier_e2e(${t}_resume_np2 2 ${model} checkpoint_e2e.sh resume 2 ${model}_np2)
  classifier_e2e(${t}_resume_s3_np3 2 ${model} checkpoint_e2e.sh resume 3 ${model}_s3_np3
    --set parallel.zero_stage=3)
endforeach()

# The encoder on hashed words (--tokenizer word-hash), mean pooling.
classifier_e2e(trainer_encoder_learn_words_np2 2 encoder trainer_e2e.sh learn 2 encoder_learn_words 0.9
  --set train.steps=150 --set train.eval_every=50 --set data.path=${CMAKE_CURRENT_BINARY_DIR}/words.h5
  --set model.seq_len=16 --set model.pooling=mean)

# Recompute on the encoder's blocks (issue 48): at 2 ranks every step's loss,
# gradient norm and weight CRC of recompute.policy = "sqrt" (pre_ln) and
# "budget" (distilbert) are bitwise those of "none", 4 blocks, dropout 0.1 on
# inside the blocks (inputs/tiny_encoder.toml), so a recomputed block must draw
# its first forward's masks. 100 steps: in 30 the 4-block models have not
# learned yet (the loss falls from 0.685 to 0.069 (pre_ln) and 0.693 to 0.330
# (distilbert) in 100).
foreach(layout pre_ln distilbert)
  set(rc --set model.n_layer=4 --set model.layout=${layout} --set train.steps=100)
  classifier_e2e(trainer_encoder_rc_${layout}_ref_np2 2 encoder trainer_e2e.sh run 2 encoder_rc_${layout}_ref_np2
    ${rc} --set train.log_every=1)
  set_tests_properties(trainer_encoder_rc_${layout}_ref_np2 PROPERTIES FIXTURES_SETUP trainer_encoder_rc_${layout}_ref)
endforeach()
# The tiny distilbert's activations per rank (trainer --plan): none 0.325 MiB, sqrt 0.250, full 0.179.
foreach(case "pre_ln;sqrt" "distilbert;budget")
  list(GET case 0 layout)
  list(GET case 1 policy)
  set(rc --set model.n_layer=4 --set model.layout=${layout} --set train.steps=100 --set recompute.policy=${policy})
  if(policy STREQUAL "budget")
    list(APPEND rc --set recompute.budget_mb=0.22)
  endif()
  classifier_e2e(trainer_encoder_rc_${policy}_np2 2 encoder trainer_e2e.sh equiv encoder_rc_${policy}_np2 2
    encoder_rc_${layout}_ref_np2 0 ${rc})
  set_tests_properties(trainer_encoder_rc_${policy}_np2 PROPERTIES
    FIXTURES_REQUIRED "trainer_encoder_rc_${layout}_ref;cls_text")
endforeach()
# The same under ZeRO stage 3 (the recomputed blocks' parameters gathered again):
# budget on distilbert against none, both at stage 3.
set(rc_s3 --set model.n_layer=4 --set model.layout=distilbert --set train.steps=100 --set parallel.zero_stage=3
    --set parallel.bucket_mb=0)
classifier_e2e(trainer_encoder_rc_s3_ref_np2 2 encoder trainer_e2e.sh run 2 encoder_rc_s3_ref_np2 ${rc_s3}
  --set train.log_every=1)
set_tests_properties(trainer_encoder_rc_s3_ref_np2 PROPERTIES FIXTURES_SETUP trainer_encoder_rc_s3_ref)
classifier_e2e(trainer_encoder_rc_budget_s3_np2 2 encoder trainer_e2e.sh equiv encoder_rc_budget_s3_np2 2
  encoder_rc_s3_ref_np2 0 ${rc_s3} --set recompute.policy=budget --set recompute.budget_mb=0.22)
set_tests_properties(trainer_encoder_rc_budget_s3_np2 PROPERTIES FIXTURES_REQUIRED "trainer_encoder_rc_s3_ref;cls_text")
# A classifier without a chain of blocks refuses any policy but "none", naming those that have one.
classifier_e2e(trainer_mlp_bad_recompute 2 mlp trainer_e2e.sh bad-input 2 mlp_recompute
  "input\\.toml: recompute\\.policy = \"sqrt\": model\\.type = \"mlp\" has no chain of blocks to recompute")

# data.in_memory: the data set held in memory ("on") and read per micro-batch
# ("off") give bitwise the same losses, evaluations and weights at 1, 2 and 3
# ranks (400 train / 100 val images and 299 / 101 documents do not divide by 3);
# each run's start-up line says which it used, and "auto" under a tiny
# data.in_memory_limit_mb falls back to file reads and says so.
foreach(np 1 2 3)
  classifier_e2e(trainer_cnn_in_memory_np${np} 2 cnn trainer_e2e.sh in-memory ${np} cnn_np${np})
endforeach()
classifier_e2e(trainer_mlp_in_memory_np3 2 mlp trainer_e2e.sh in-memory 3 mlp_np3)
classifier_e2e(trainer_encoder_in_memory_np2 2 encoder trainer_e2e.sh in-memory 2 encoder_np2)
classifier_e2e(trainer_cnn_in_memory_bf16_np3 2 cnn trainer_e2e.sh in-memory 3 cnn_bf16_np3
  --set precision.mode=bf16 --set parallel.zero_stage=2)

# Bad input: exit code 2 and one message naming the file.
classifier_e2e(trainer_mlp_bad_text_data 2 mlp trainer_e2e.sh bad-input 2 mlp_on_text
  "text\\.h5: holds token samples, but model\\.type = \"mlp\" reads images")
set_tests_properties(trainer_mlp_bad_text_data PROPERTIES FIXTURES_REQUIRED "cls_images;cls_text")
classifier_e2e(trainer_cnn_bad_kernel 2 cnn trainer_e2e.sh bad-input 2 cnn_kernel
  "input\\.toml: the model\\.\\* keys do not fit the images of .*images\\.h5")
# A label out of range, found when the data set is loaded into memory (before the
# first step), named with the file, split and row, at 3 ranks.
classifier_e2e(trainer_cnn_bad_label_in_memory 2 cnn trainer_e2e.sh bad-input 3 cnn_bad_label
  "images_bad_label\\.h5: /train/labels\\[5\\]: label 12 out of range \\[0, 10\\)")
set_tests_properties(trainer_cnn_bad_label_in_memory PROPERTIES FIXTURES_REQUIRED "cls_images;cls_bad_label")
