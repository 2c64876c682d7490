ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
for v in "compile" "3098625536" "3098625536 noff" "compile"; do
  set -- $v
  if [ "$2" = noff ]; then export MEMOPT_DISABLE_PASSES=offload; tag=noff; else unset MEMOPT_DISABLE_PASSES; tag=$1; fi
  T0=$(date +%s); timeout 150 python docs/data/logs/s61/kdiff.py swin $1 $OUT/kern_swin_${tag}_$T0.json > $OUT/logs/kern_swin_${tag}_$T0.log 2>&1; echo "$v rc=$? $(( $(date +%s)-T0 ))s"; tail -n 2 $OUT/logs/kern_swin_${tag}_$T0.log
done
