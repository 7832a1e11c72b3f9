"""Numbers printed in the DLPerf seed reports (/work/shared/seeds, copied here as test data).

``TRIALS``: per topology, the per-trial speeds exactly as DLPerf's extractor printed them
(``{trial: speed}``, the last, complete line of each cell). ``DICT``: the result dict printed
at the end. ``TABLE``: the Markdown table of the same configuration in the report.
"""

SEED_000_MXNET_BERT_BZ32 = {
    "suite": "mxnet-bert", "framework": "mxnet_bert", "model": "bert-base", "dlperf_model": "bert-base",
    "batch_size_per_device": 32, "precision": "fp32", "style": "dlperf",
    "TRIALS": {
        "4n8g": {3: 1881.88, 4: 1985.75, 6: 2092.25, 1: 1895.5, 5: 1888.38, 7: 1902.62, 2: 1697.88},
        "1n8g": {3: 928.03, 4: 929.69, 6: 926.44, 1: 932.47, 5: 944.12, 7: 926.88, 2: 922.0},
        "1n1g": {3: 125.48, 4: 127.17, 6: 127.73, 1: 126.29, 5: 127.09, 7: 127.05, 2: 126.4},
        "2n8g": {3: 1171.19, 4: 1107.62, 6: 1152.5, 1: 1159.12, 5: 1136.44, 7: 1090.31, 2: 1033.88},
    },
    "DICT_TEXT": """{'bert-base': {'1n1g': {'average_speed': 126.74,
                        'batch_size_per_device': 32,
                        'median_speed': 127.05,
                        'speedup': 1.0},
               '1n8g': {'average_speed': 929.95,
                        'batch_size_per_device': 32,
                        'median_speed': 928.03,
                        'speedup': 7.3},
               '2n8g': {'average_speed': 1121.58,
                        'batch_size_per_device': 32,
                        'median_speed': 1136.44,
                        'speedup': 8.94},
               '4n8g': {'average_speed': 1906.32,
                        'batch_size_per_device': 32,
                        'median_speed': 1895.5,
                        'speedup': 14.92}}}""",
    "TABLE": """| node_num | gpu_num | samples/s | speedup |
| -------- | ------- | --------- | ------- |
| 1        | 1       | 127.05    | 1.00    |
| 1        | 8       | 928.03    | 7.3     |
| 2        | 16      | 1136.44   | 8.94    |
| 4        | 32      | 1895.50   | 14.92   |""",
}

SEED_003_TF_BERT_BZ64 = {
    "suite": "tensorflow-bert", "framework": "tensorflow_bert", "model": "bert-base", "dlperf_model": "bert",
    "batch_size_per_device": 64, "precision": "fp32", "style": "compact",
    "TRIALS": {
        "4n8g": {2: 2237.6, 1: 2238.39, 5: 2244.38, 3: 2252.55, 4: 2249.41},
        "1n2g": {2: 202.48, 1: 204.3, 5: 203.15, 3: 204.16, 4: 204.96},
        "1n1g": {2: 114.95, 1: 113.55, 5: 111.67, 3: 112.99, 4: 112.71},
        "2n8g": {2: 1242.44, 1: 1237.07, 5: 1249.61, 3: 1237.47, 4: 1239.3},
        "1n4g": {2: 402.02, 1: 399.56, 5: 400.27, 3: 404.06, 4: 402.34},
        "1n8g": {2: 805.43, 1: 806.74, 5: 803.36, 3: 806.01, 4: 805.41},
    },
    # the seed text lost pprint's indentation; compare line by line after strip()
    "DICT_TEXT": """{'bert': {'1n1g': {'average_speed': 113.17,
'batch_size_per_device': 64,
'median_speed': 112.99,
'speedup': 1.0},
'1n2g': {'average_speed': 203.81,
'batch_size_per_device': 64,
'median_speed': 204.16,
'speedup': 1.81},
'1n4g': {'average_speed': 401.65,
'batch_size_per_device': 64,
'median_speed': 402.02,
'speedup': 3.56},
'1n8g': {'average_speed': 805.39,
'batch_size_per_device': 64,
'median_speed': 805.43,
'speedup': 7.13},
'2n8g': {'average_speed': 1241.18,
'batch_size_per_device': 64,
'median_speed': 1239.3,
'speedup': 10.97},
'4n8g': {'average_speed': 2244.47,
'batch_size_per_device': 64,
'median_speed': 2244.38,
'speedup': 19.86}}}""",
    "TABLE": """node_num | gpu_num | samples/s | speedup |
---|---|---|---|
1 | 1 | 112.99 | 1 |
1 | 2 | 204.16 | 1.81 |
1 | 4 | 402.02 | 3.56 |
1 | 8 | 805.43 | 7.13 |
2 | 16 | 1239.3 | 10.97 |
4 | 32 | 2244.38 | 19.86 |""",
}

SEED_004_MXNET_RN50_BZ128 = {
    "suite": "mxnet-resnet50", "framework": "mxnet_resnet50", "model": "resnet50-v1b", "dlperf_model": "rn50",
    "batch_size_per_device": 128, "precision": "fp32", "style": "dlperf",
    "TRIALS": {
        "1n2g": {4: 740.66, 2: 749.04, 3: 754.4, 1: 755.7, 5: 748.58},
        "2n8g": {4: 4855.34, 2: 4850.36, 3: 4843.76, 1: 4924.15, 5: 4866.14},
        "1n1g": {4: 385.31, 2: 384.16, 3: 384.19, 1: 385.23, 5: 384.04},
        "4n8g": {4: 9568.3, 2: 9611.24, 3: 9579.55, 1: 9579.74, 5: 9631.67},
        "1n4g": {4: 1494.58, 2: 1492.14, 3: 1501.75, 1: 1498.84, 5: 1494.29},
        "1n8g": {4: 2564.3, 2: 2539.38, 3: 2561.71, 1: 2556.03, 5: 2532.26},
    },
    "DICT_TEXT": """{'rn50': {'1n1g': {'average_speed': 384.59,
                   'batch_size_per_device': 128,
                   'median_speed': 384.19,
                   'speedup': 1.0},
          '1n2g': {'average_speed': 749.68,
                   'batch_size_per_device': 128,
                   'median_speed': 749.04,
                   'speedup': 1.95},
          '1n4g': {'average_speed': 1496.32,
                   'batch_size_per_device': 128,
                   'median_speed': 1494.58,
                   'speedup': 3.89},
          '1n8g': {'average_speed': 2550.74,
                   'batch_size_per_device': 128,
                   'median_speed': 2556.03,
                   'speedup': 6.65},
          '2n8g': {'average_speed': 4867.95,
                   'batch_size_per_device': 128,
                   'median_speed': 4855.34,
                   'speedup': 12.64},
          '4n8g': {'average_speed': 9594.1,
                   'batch_size_per_device': 128,
                   'median_speed': 9579.74,
                   'speedup': 24.93}}}""",
    "TABLE": """| node_num | gpu_num | samples/s | speedup |
| -------- | ------- | --------- | ------- |
| 1        | 1       | 384.19    | 1.00    |
| 1        | 2       | 749.04    | 1.95    |
| 1        | 4       | 1494.58   | 3.89    |
| 1        | 8       | 2556.03   | 6.65    |
| 2        | 16      | 4855.34   | 12.64   |
| 4        | 32      | 9579.74   | 24.93   |""",
}

SEEDS = {
    "000-mxnet-bert-bz32": SEED_000_MXNET_BERT_BZ32,
    "003-tf-bert-bz64": SEED_003_TF_BERT_BZ64,
    "004-mxnet-rn50-bz128": SEED_004_MXNET_RN50_BZ128,
}
